/* The OpenTelemetry memory design's USDT probes (usdt.c): what a sampled event tells an eBPF
 * profiler attached from outside (the OpenTelemetry eBPF profiler, Datadog's agent, bpftrace). */
#ifndef MEMLENS_USDT_H
#define MEMLENS_USDT_H
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* otel_memory:alloc(ptr, size, weight): a sampled allocation of `size` bytes at `p` (NULL when the
 * block could not be kept: `untracked`), standing for `weight` bytes — what it adds to alloc_space. */
void ml_usdt_alloc(void *p, uint64_t size, uint64_t weight);
/* otel_memory:free(ptr): a block some otel_memory:alloc announced is freed. */
void ml_usdt_free(void *p);

#pragma GCC visibility pop
#endif
