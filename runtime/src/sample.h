/* Slow-path decisions shared by the interposers (alloc.c) and the sampler (sample.c). */
#ifndef MEMLENS_SAMPLE_H
#define MEMLENS_SAMPLE_H
#include "cost.h"
#include "rt.h"

enum { ML_FORWARD, ML_SAMPLE, ML_EXACT, ML_BOOT };

/* Called when the countdown ran out (or is not armed). Re-arms it and says what to do with this
 * allocation of `size` bytes. */
int ml_slow_decide(size_t size);
/* Serve a sampled block from the private range and record it; NULL if the range is exhausted. */
void *ml_sample_alloc(size_t size, size_t align, int zero, uintptr_t ra);
/* Exact mode: record an allocation served by the real allocator (cumulative counts only). */
void ml_exact_record(size_t size, uintptr_t ra);

/* alloc.c: the allocation paths with an explicit return address (shared with newdel.c). */
void *ml_malloc_slow(size_t size, uintptr_t ra);
static inline void *ml_malloc_from(size_t size, uintptr_t ra)
{
    ML_COUNTDOWN_OR(size, slow);
    return ml_real.malloc(size);
slow:
    return ml_malloc_slow(size, ra);
}
enum { AL_POSIX, AL_ALIGNED, AL_MEMALIGN };
void *ml_aligned_slow(int how, size_t align, size_t size, int *err, uintptr_t ra);
void *ml_aligned_from(int how, size_t align, size_t size, int *err, uintptr_t ra);
#endif
