/* GOT patching for `memlens attach` (got.c), used by attach.c. */
#ifndef MEMLENS_GOT_H
#define MEMLENS_GOT_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* Free-side hooks must see every block we hand out, so they go in first and stay for the life of
 * the process; allocation hooks go in last and come out at detach. */
enum { ML_HOOK_FREE, ML_HOOK_ALLOC };

struct ml_hook {
    const char *name;
    int side;
    void *ours; /* our exported function */
    void *real; /* the definition the program's relocations bind to (the next allocator) */
};
extern struct ml_hook ml_hooks[];
extern const int ml_nhooks;

/* What a pass over the loaded modules does to each matching slot. */
enum ml_got_op {
    ML_GOT_FREE,   /* point free-side slots holding `real` (or a lazy PLT stub) at ours */
    ML_GOT_ALLOC,  /* the same for allocation slots, each module's free side first */
    ML_GOT_UNHOOK, /* point allocation slots holding ours back at `real` */
};

/* Resolve `ours` and `real` for every hook. Returns NULL or why it cannot be done (one phrase). */
const char *ml_got_resolve(void);
/* Apply `op` to every loaded module except ld.so, the vdso and ourselves. Returns the number of
 * slots changed, or -1 if a RELRO page could not be made writable (the slots done stay done). */
int ml_got_apply(enum ml_got_op op);
/* 1 if the last FREE or ALLOC pass left modules out (loaded or unloaded while it ran, or too many):
 * the caller should run the pass again a little later. */
int ml_got_retry(void);
/* After a pass returned -1: the module whose RELRO page could not be made writable, the page,
 * and mprotect's errno. The module's name is the loader's: valid while the module stays loaded. */
void ml_got_failure(const char **module, uintptr_t *page, int *err);
/* After ml_got_resolve: 1 if the program defines the malloc family itself (a statically linked
 * allocator, hooked at its entry points instead: finder.c); allocation slots are then left alone,
 * so a call is never counted by both. */
int ml_got_static_allocator(void);
/* Number of modules ever added to the process (dl_iterate_phdr's dlpi_adds): changes on dlopen. */
unsigned long long ml_got_adds(void);

#pragma GCC visibility pop

#endif
