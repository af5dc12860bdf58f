/* The loaded modules (modules.c): their build IDs and segments for a dump's `module` lines, kept in
 * the state (state.h) as they load, and remembered when dlclose'd. */
#ifndef MEMLENS_MODULES_H
#define MEMLENS_MODULES_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* Modules: every loaded one (constructor), the ones the frames of a new stack lie in, and one
 * being dlclose'd (it stays, marked). */
void ml_state_modules_init(void);
void ml_state_modules_note(const uintptr_t *pcs, int depth);
void ml_state_module_unloaded(uintptr_t base, const char *path);
/* dlclose(handle) is about to run (dlclose.c): remember its module, in case the call unloads it. */
void ml_modules_unloading(void *handle);
/* A dump's `module` and `segment` lines. */
void ml_modules_write(struct ml_out *o);
/* Fork child: the modules lock may have been held by a thread of the parent. */
void ml_modules_reset_lock(void);

#pragma GCC visibility pop
#endif
