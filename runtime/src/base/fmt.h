/* Digits and lines without stdio or malloc (fmt.c). */
#ifndef MEMLENS_FMT_H
#define MEMLENS_FMT_H
#include "rt.h"

#pragma GCC visibility push(hidden)

/* fmt.c: digits without stdio or malloc. buf holds at least ML_FMT_MAX bytes; both return the length
 * written (a NUL follows). ml_fmt_u64 pads with zeros to `width` digits (0: no padding, width < 21). */
#define ML_FMT_MAX 24
size_t ml_fmt_u64(char *buf, uint64_t v, int width);
size_t ml_fmt_hex(char *buf, uint64_t v); /* "0x…" */

/* A line built in a caller's fixed buffer (the control replies, socket paths): what does not fit is
 * cut, and p[len] is always NUL. cap > 0. */
struct ml_buf {
    char *p;
    size_t len, cap;
};
void ml_buf_str(struct ml_buf *b, const char *s);
void ml_buf_u64(struct ml_buf *b, uint64_t v);
/* " key=v" */
void ml_buf_kv(struct ml_buf *b, const char *key, uint64_t v);

#pragma GCC visibility pop
#endif
