/* `memlens attach`, seen from the control socket (attach.c). */
#ifndef MEMLENS_ATTACH_H
#define MEMLENS_ATTACH_H
#include <stddef.h>

#pragma GCC visibility push(hidden)

/* The socket's `attach` and `detach` requests: 1 (the reply written to out) if `cmd` is one of
 * them, else 0. Weak: ctl.c tests for it, and answers "error unknown command" without it. */
int ml_attach_ctl(const char *cmd, const char *arg, char *out, size_t cap) __attribute__((weak));

#pragma GCC visibility pop
#endif
