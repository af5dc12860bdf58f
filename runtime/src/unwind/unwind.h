/* The fp, libgcc and libunwind unwinders, and the stack of an allocation in the table (unwind.c). */
#ifndef MEMLENS_UNWIND_H
#define MEMLENS_UNWIND_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

#define ML_UNWIND_BUF (ML_MAX_DEPTH + 16 + 1)
int ml_unwind(uintptr_t *buf, int max, int *truncated, uintptr_t ra, const uintptr_t **out);
void ml_unwind_setup(void);
/* Load libunwind for MEMLENS_UNWINDER=libunwind (unwind.c says why only then): 0, or -1 and why. */
int ml_unwind_load_libunwind(const char **why);
/* Is pc in the runtime's own module (known once ml_unwind_setup ran)? */
int ml_unwind_is_self(uintptr_t pc);
/* The stack of the current allocation (ra: the return address into malloc's caller) in the table;
 * ML_NO_STACK if it is full. Counts truncated stacks and fallbacks when `sample`. */
uint32_t ml_unwind_intern(uintptr_t ra, int sample);

#pragma GCC visibility pop
#endif
