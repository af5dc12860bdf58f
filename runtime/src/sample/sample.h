/* The slow path of an allocation: the Poisson countdown, weights and recording a sample (sample.c). */
#ifndef MEMLENS_SAMPLE_H
#define MEMLENS_SAMPLE_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

enum { ML_FORWARD, ML_SAMPLE, ML_EXACT, ML_BOOT };

/* Called when the countdown ran out (or is not armed). Re-arms it and says what to do with this
 * allocation of `size` bytes. */
int ml_slow_decide(size_t size);
/* Serve a sampled block from the private range and record it; NULL if the range is exhausted. */
void *ml_sample_alloc(size_t size, size_t align, int zero, uintptr_t ra);
/* Exact mode: record an allocation served by the real allocator (cumulative counts only). */
void ml_exact_record(size_t size, uintptr_t ra);
/* The weights of a sample of `size` bytes at interval R (0: exact): 1/p in 16.16 fixed point
 * (objects) and size/p, p = 1 - exp(-size/R). */
void ml_weights(uint64_t size, uint64_t R, uint64_t *fx, uint64_t *bytes);
/* Exp(R) bytes for this thread (for a block's own draw); at least 1. */
uint64_t ml_draw(uint64_t R);
/* Fork child: a fresh random state and countdown for the thread that forked. */
void ml_sample_fork_child(void);

#pragma GCC visibility pop
#endif
