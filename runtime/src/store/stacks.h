/* The lock-free stack table and its records (stacks.c). */
#ifndef MEMLENS_STACKS_H
#define MEMLENS_STACKS_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

#define ML_NO_STACK 0xffffffffu
/* A stack's flags, part of its identity: truncated, and recorded for anonymous mmap (issue 31). */
#define ML_STACK_TRUNC 1u
#define ML_STACK_MMAP 2u
#define ML_STACK_FLAGS (ML_STACK_TRUNC | ML_STACK_MMAP)

struct ml_stack {
    uint64_t hash;
    uint32_t depth, flags;
    _Atomic uint64_t samples, alloc_fx, alloc_bytes;
    _Atomic int64_t inuse_fx, inuse_bytes;
    /* the views (views.h): peak set, lifetimes, live age (zero in a fresh record) */
    _Atomic int64_t peak_fx, peak_bytes;       /* inuse at the last peak snapshot */
    _Atomic uint64_t age_sum;                  /* sum of w_bytes * age units (views.h) of timed live blocks */
    _Atomic int64_t age_w;                     /* sum of their w_bytes */
    int64_t dumped_inuse;                      /* inuse_bytes at the previous dump (growth) */
    _Atomic uint64_t life[10];                 /* w_bytes freed, by lifetime decade (ML_LIFE_BUCKETS) */
    /* a dump's scratch (dump lock held): what live blocks have not flushed yet (block.c), valid
     * when d_gen is the dump's: only the records a dump adds to are written */
    int64_t d_alloc_fx, d_alloc_bytes, d_inuse_fx, d_inuse_bytes;
    uint32_t d_gen;
    uintptr_t pcs[];
};
int ml_stacks_init(void);
uint32_t ml_stack_intern(const uintptr_t *pcs, int depth, int truncated);
struct ml_stack *ml_stack_get(uint32_t id);
uint32_t ml_stack_count(void);
/* The table's limit (MEMLENS_MAX_STACKS) and the samples of new stacks dropped at it. */
uint32_t ml_stacks_max(void);
uint64_t ml_stacks_full_drops(void);
void ml_stacks_zero_alloc(void);
/* Sums over the table, for status: samples and estimated bytes allocated. */
void ml_stacks_totals(uint64_t *samples, uint64_t *alloc_bytes);
void ml_stacks_each(void (*fn)(struct ml_stack *, void *), void *arg);
/* The same, in creation order, over a dense list: cheap enough for a peak snapshot. */
void ml_stacks_each_listed(void (*fn)(struct ml_stack *, void *), void *arg);
/* Fork child: cumulative counts restart at zero without writing every record (stacks.c). */
void ml_stacks_fork_child(void);
/* The record still holds the parent's cumulative counts (read them as zero). */
int ml_stack_stale(const struct ml_stack *r);
/* Call before adding to a record's cumulative counts. */
void ml_stack_touch(struct ml_stack *r);

#pragma GCC visibility pop
#endif
