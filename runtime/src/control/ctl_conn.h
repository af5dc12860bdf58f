/* The control socket's connections (ctl_conn.c), read by the runtime's thread (ctl.c). */
#ifndef MEMLENS_CTL_CONN_H
#define MEMLENS_CTL_CONN_H
#include <poll.h>

#include "../base/rt.h"

#pragma GCC visibility push(hidden)

#define ML_CONNS 16 /* connections read at once */

/* Forget every connection (a fork child: they are the parent's). */
void ml_conns_reset(void);
/* Close every connection that is still ours. */
void ml_conns_close(void);
/* Accept every pending connection on `listener` (ours, checked). 0, or -1 when it is gone. */
int ml_conns_accept(int listener);
/* Answer the connections whose time is up at `now` (CLOCK_MONOTONIC ms); add a pollfd for each
 * other one to p (from p[*n] on; `tag[i]` remembers which) and lower *wake to the nearest deadline. */
void ml_conns_poll_set(int64_t now, struct pollfd *p, int *tag, int *n, int64_t *wake);
/* Read connection `tag` after poll said it has something. */
void ml_conns_read(int tag);
/* CLOCK_MONOTONIC in ms. */
int64_t ml_conns_now_ms(void);

#pragma GCC visibility pop
#endif
