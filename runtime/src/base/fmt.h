/* Digits without stdio or malloc (fmt.c). */
#ifndef MEMLENS_FMT_H
#define MEMLENS_FMT_H
#include "rt.h"

#pragma GCC visibility push(hidden)

/* fmt.c: digits without stdio or malloc. buf holds at least ML_FMT_MAX bytes; both return the length
 * written (a NUL follows). ml_fmt_u64 pads with zeros to `width` digits (0: no padding, width < 21). */
#define ML_FMT_MAX 24
size_t ml_fmt_u64(char *buf, uint64_t v, int width);
size_t ml_fmt_hex(char *buf, uint64_t v); /* "0x…" */

#pragma GCC visibility pop
#endif
