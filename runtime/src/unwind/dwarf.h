/* The default `dwarf` unwinder (dwarf.c): CFI rules walked from malloc's caller, with a per-thread
 * stack cache. */
#ifndef MEMLENS_DWARF_H
#define MEMLENS_DWARF_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* The stack of the current allocation as a stack id, via CFI rules and the per-thread stack cache;
 * 0 if this stack needs another unwinder. */
int ml_dwarf_stack(uintptr_t ra, int max, uint32_t *id, int *trunc);
/* A walk from a frame another unwinder reached — `ra` stored at sp0 (the caller's stack pointer at
 * the call is sp0 + 8), rbp0 the caller's rbp — into pcs (ra first). The number of frames, or -1
 * if a frame has no CFI this unwinder follows. */
int ml_dwarf_continue(uintptr_t ra, uintptr_t sp0, uintptr_t rbp0, uintptr_t hi, int foreign,
                      uintptr_t *pcs, int max, int *trunc);
/* Code was unloaded (dlclose): rules and cached stacks may no longer hold. */
void ml_dwarf_code_unloaded(void);

#pragma GCC visibility pop
#endif
