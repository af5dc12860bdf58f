/* A small buffered writer for dumps and log lines, no stdio, no malloc (out.c). */
#ifndef MEMLENS_OUT_H
#define MEMLENS_OUT_H
#include "rt.h"

#pragma GCC visibility push(hidden)

struct ml_out { int fd; int err; size_t n; char buf[4096]; };
void ml_out_str(struct ml_out *o, const char *s);
void ml_out_path(struct ml_out *o, const char *s);
void ml_out_u64(struct ml_out *o, uint64_t v);
void ml_out_i64(struct ml_out *o, int64_t v);
void ml_out_hex(struct ml_out *o, uint64_t v);
void ml_out_flush(struct ml_out *o);

#pragma GCC visibility pop
#endif
