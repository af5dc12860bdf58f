/* When to sample: the Poisson countdown, its draws and a sample's weights (sample.c). Recording a
 * sample is the seam's (intercept/source.c). */
#ifndef MEMLENS_SAMPLE_H
#define MEMLENS_SAMPLE_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* What to do with an allocation whose countdown ran out: forward it, sample it, record it exactly
 * (interval 0), or, while ml_init runs on this thread, serve it from the boot arena (the seam
 * decides that one: intercept/source.c). */
enum { ML_FORWARD, ML_SAMPLE, ML_EXACT, ML_BOOT };

/* Called when the countdown ran out (or is not armed), the runtime initialised. Re-arms it and says
 * what to do with this allocation of `size` bytes. */
int ml_slow_decide(size_t size);
/* The weights of a sample of `size` bytes at interval R (0: exact): 1/p in 16.16 fixed point
 * (objects) and size/p, p = 1 - exp(-size/R). */
void ml_weights(uint64_t size, uint64_t R, uint64_t *fx, uint64_t *bytes);
/* Exp(R) bytes for this thread (for a block's own draw); at least 1. */
uint64_t ml_draw(uint64_t R);
/* Uniform in (0, 1] for this thread (a sampled block's halves, record/block.c). */
double ml_uniform(void);
/* Fork child: a fresh random state and countdown for the thread that forked. */
void ml_sample_fork_child(void);

#pragma GCC visibility pop
#endif
