/* Messages on stderr (log.c): one line each, `memlens: ` first, written with write(2) from the
 * stack (no stdio, no malloc: they are printed from inside malloc, in fork children and from
 * _exit). The format is a subset of printf's that log.c lists; `%m` is the errno the caller had, as
 * "<description> (errno N ENAME)". Every message says what failed, on which path or value, and
 * why: "cannot bind the control socket /tmp/memlens-1000/42.4026531836.sock: Address already in use
 * (errno 98 EADDRINUSE)". */
#ifndef MEMLENS_LOG_H
#define MEMLENS_LOG_H
#include "rt.h"

#pragma GCC visibility push(hidden)

#define ML_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Remember what fd 2 is now (config.c, first thing at start-up): messages are written to fd 2 only
 * while it is still that file. */
void ml_log_init(void);
void ml_log(const char *fmt, ...) ML_PRINTF(1, 2);
/* An internal failure: profiling stops for good (ml_cfg.failed), the program continues. The
 * message is printed the first time only, with a line saying so. Calls nothing but the log: it is
 * safe from any file, at any time (inside ml_init, a fork child, the control thread). */
void ml_fail(const char *fmt, ...) ML_PRINTF(1, 2);

#pragma GCC visibility pop
#endif
