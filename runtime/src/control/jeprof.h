/* jemalloc's own profiler, switched from the control socket (jeprof.c). */
#ifndef MEMLENS_JEPROF_H
#define MEMLENS_JEPROF_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

void ml_jemalloc_ctl(const char *arg, char *out, size_t cap);

#pragma GCC visibility pop
#endif
