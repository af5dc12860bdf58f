/* Start-up that may run inside the first malloc (boot.c): the real functions, the range and the
 * stack table, before anything else of the runtime is used. */
#ifndef MEMLENS_BOOT_H
#define MEMLENS_BOOT_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* Idempotent and thread-safe; returns at once once done. A recursive call from this thread (dlsym
 * allocating) returns at once too: ml_tls.in_init then says to serve from the boot arena. */
void ml_init(void);

#pragma GCC visibility pop
#endif
