/* The interposed malloc family's paths with an explicit return address (alloc.c), shared with the
 * C++ operators (newdel.c), which pass their own caller. */
#ifndef MEMLENS_ALLOC_H
#define MEMLENS_ALLOC_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

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

#pragma GCC visibility pop
#endif
