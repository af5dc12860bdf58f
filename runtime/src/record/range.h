/* The private address range holding sampled blocks and the boot arena (range.c). */
#ifndef MEMLENS_RANGE_H
#define MEMLENS_RANGE_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

extern uintptr_t ml_range_base, ml_range_span;
static inline int ml_in_range(const void *p) { return (uintptr_t)p - ml_range_base < ml_range_span; }
int ml_range_init(void);
/* Is address space (RLIMIT_AS) or commit charge (strict overcommit) scarce? Then the runtime takes
 * no more of it than it must (source.c: placeholders of small blocks only). */
int ml_range_scarce(void);
void *ml_boot_alloc(size_t size);
/* Header right before every block in the range (176 bytes, keeps 16-byte alignment). The memory
 * fields belong to range.c; the accounting fields to block.c, which changes them with the range
 * lock held, except `size` and the pending counts, which only the thread resizing the block writes. */
struct ml_block {
    uint32_t stack;        /* stack record its weights are counted on, or ML_NO_STACK */
    uint16_t kind, cls;    /* ML_KIND_*, size class of the chunk */
    uint64_t size;         /* requested size */
    uint64_t off;          /* user pointer - chunk start */
    uint64_t cap;          /* bytes of the chunk (range.c) */
    /* block.c: what the block adds to its stack's live counts and to the heap estimate (0, 0 when
     * the block is in the range but not sampled at its current size), for `counted` bytes */
    uint64_t w_fx, w_bytes, counted;
    uint64_t w_half[2];    /* what it adds to each half-sample heap estimate (peak.c), for `counted` */
    uint64_t born;         /* allocation tick (views.h); 0 = not timed, not in the heap estimate */
    uintptr_t ra;          /* call site of the event that chose `stack` */
    /* this block's own draws for later resizes: one Exp(2R) point per half-sample (block.c); the
     * block is sampled at a size that reaches either. A block not resized yet has 0 (member) or
     * UINT64_MAX (not) per half: min 0 = not drawn */
    uint64_t point_h[2], point_R;
    uint64_t pend_bytes;   /* reallocations since the last flush, counted exactly (block.c) */
    uint32_t pend_objs, gen; /* and their number; the profile generation they belong to */
    void *heap;            /* mimalloc's heap it was asked of (hooks.c), or NULL: its thread's backing
                            * heap, or another allocator. mi_heap_destroy frees the heap's blocks */
    struct ml_block *prev, *next; /* the list of live sampled blocks */
    struct ml_block *deferred; /* block.c: the next block whose free waits (a free from a signal
                                  handler that interrupted the runtime) */
    uint64_t usable;           /* block.c: the usable size the program is told (the family's class
                                  for `size`; 0: `size`) */
    void *placeholder;         /* block.h: the real allocator's chunk that stands in its place, or NULL */
};
#define ML_KIND_BOOT 1u
#define ML_KIND_SAMPLED 2u
/* range.c hands out and takes back chunks; block.c does that and the accounting under one lock. */
void ml_range_lock(void);
void ml_range_unlock(void);
void ml_range_reset_lock(void);
/* For a dump: the lock, unless this thread holds it (a signal handler interrupted it) or another
 * holds it for longer than a second. 1 if taken. */
int ml_range_lock_bounded(void);
/* With the lock held: a block of `size` bytes (header filled in, accounting fields zero). A large
 * one is cleared here when `zero`; a small one's *dirty says whether its bytes held data before
 * (the caller clears it then, after the lock). NULL if the range is exhausted. */
struct ml_block *ml_range_alloc_locked(size_t size, size_t align, int zero, int *dirty);
/* Without the lock: can a block be resized to `size` within its chunk (a small block's class)? */
int ml_range_fits(const struct ml_block *b, size_t size);
/* With the lock held: grow or shrink a large block in place by taking or giving back the pages
 * after it; 1 (and the block's size and cap are set) or 0. */
int ml_range_resize_locked(struct ml_block *b, size_t size);
void ml_range_free_locked(struct ml_block *b);
/* With the lock held, from peak.c at every change of the estimated heap: how far it is below its
 * peak. Freed pages stay resident for reuse only within that (and the range's own high-water mark):
 * the program's footprint at its peak holds no pages it freed. */
void ml_range_heap_room_locked(int64_t below_peak);
/* Real bytes of the chunks of live sampled blocks (the allocator does not see them). */
int64_t ml_range_live_bytes(void);
/* Where that count lives (memlens detach reads it from outside, every thread stopped: hooks.c). */
const _Atomic int64_t *ml_range_live_addr(void);
static inline struct ml_block *ml_block_of(void *p) { return (struct ml_block *)p - 1; }

#pragma GCC visibility pop
#endif
