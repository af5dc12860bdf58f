/* `memlens attach`, seen from the control socket's protocol (attach.c). */
#ifndef MEMLENS_ATTACH_H
#define MEMLENS_ATTACH_H
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* The socket's `attach` and `detach` requests: 1 (the reply written to out) if `cmd` is one of
 * them, else 0. A runtime that was not loaded by `memlens attach` answers them with an error. */
int ml_attach_ctl(const char *cmd, const char *arg, char *out, size_t cap);

/* The runtime's thread (ctl.c), at every wake-up: patch the modules loaded since the last call.
 * Returns the ms until it wants to be called again, or -1 (not attached, or no longer watching). */
int64_t ml_attach_tick(void);

#pragma GCC visibility pop
#endif
