/* The estimated live heap and the peak snapshot (peak.c), fed by block.c with the range lock held. */
#ifndef MEMLENS_PEAK_H
#define MEMLENS_PEAK_H
#include "../base/views.h"

#pragma GCC visibility push(hidden)

/* The estimate changed by `delta` bytes (each half-sample's by dhalf) at tick `now`; 1 when that took a peak snapshot (the caller
 * then adds a timeline point, after the lock). */
int ml_heap_change_locked(int64_t delta, const int64_t dhalf[2], uint64_t now);
int64_t ml_heap_now(void);
/* The share of ml_heap_now() that is anonymous mappings (mmap.c's shadows): one load, whatever the
 * heap's size. */
int64_t ml_heap_mmap_now(void);
/* Half-sample h's estimate (0 or 1: peak.c's split). */
int64_t ml_heap_half(int h);
/* The peak columns hold this process's snapshot (a fork child has none until it grows). */
int ml_peak_valid(void);
void ml_peak_fork_child(uint64_t now);
/* view heap/heap_max/peak lines; `unflushed`: the estimate's share of what blocks have not flushed. */
void ml_peak_write(struct ml_out *o, int64_t unflushed);

#pragma GCC visibility pop
#endif
