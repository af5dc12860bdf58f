/* The control socket's protocol (ctl_proto.c): one request line in, one reply line out. */
#ifndef MEMLENS_CTL_PROTO_H
#define MEMLENS_CTL_PROTO_H
#include "../base/fmt.h"

#pragma GCC visibility push(hidden)

#define ML_CTL_LINE_MAX 512 /* a request: a command word and a file name, its newline included */

/* The reply (without its newline) to a request read by the thread (ctl.c): the `len` bytes at `line`
 * (without the newline; a trailing '\r' is dropped; line[len] is writable) are executed only when
 * they are `complete`, fitted in ML_CTL_LINE_MAX (not `too_long`) and came from a peer `allowed` to
 * control us. */
void ml_ctl_reply(char *line, size_t len, int complete, int too_long, int allowed, struct ml_buf *r);

#pragma GCC visibility pop
#endif
