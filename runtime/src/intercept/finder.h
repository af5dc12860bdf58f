/* Allocators linked into the program (finder.c): found by the symbols of every loaded module and
 * hooked at their entry points (hooks.c, patch.c), so that a program whose allocator is not the
 * dynamic malloc is profiled as well; where memlens cannot see an allocator it says so. */
#ifndef MEMLENS_FINDER_H
#define MEMLENS_FINDER_H
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

enum ml_hook_mode {
    ML_HOOK_NOW,   /* `memlens run`, before main, or a library being loaded: write the jumps now */
    ML_HOOK_DEFER, /* `memlens attach`: plan them, and leave them in memlens_pending for memlens to
                    * write with every thread of the process stopped */
};

/* Scan the modules not scanned yet, hook the allocators found in them and say so (stderr, once per
 * allocator, and in the dump's notes). `summary` (may be NULL) gets the same as one line. Returns
 * the number of entry points hooked (or planned). */
int ml_hooks_scan(enum ml_hook_mode mode, char *summary, size_t cap);
/* Hooks on allocation entry points stop counting (their stubs lead to the originals) or start
 * again; frees keep recognising sampled blocks. Detach, and a program that reports its allocations
 * itself (memlens_report_alloc), switch them off. */
void ml_hooks_counting(int on);
/* Sampling switched on or off (control.c): the allocating entry points' checks run or are jumped
 * over (patch.h, ml_patch_sampling). */
void ml_hooks_sampling(int on);
/* 1 if the runtime was preloaded (memlens run: the constructor hooks now, before main); 0 if it was
 * loaded into a running process (memlens attach: hooks wait for every thread to be stopped). */
int ml_hooks_at_start(void);
/* The entry points hooked so far (0: none). */
int ml_hooks_count(void);

/* The loader's notification of new modules (r_debug.r_brk, loadwatch.c): hooked under `memlens run`,
 * so that a library loaded later (dlopen) is scanned and hooked before its code runs. Once. */
void ml_loader_watch(void);
/* The same under `memlens attach`: the jump planned in the exported memlens_loadwatch, for memlens
 * to write with every thread stopped (again after each plan of hooks: at attach and re-attach). */
void ml_loader_watch_plan(void);
/* 1 while a scan runs inside the loader (a dlopen of the program): no dlopen of ours then. */
extern int ml_loader_context;

#pragma GCC visibility pop
#endif
