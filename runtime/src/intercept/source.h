/* The allocation-source seam (source.c): the one place where every interceptor reports an allocation
 * and a free, so that each source of allocations reaches the one sampled path (the byte countdown,
 * the stack table, the views, the state, control) the same way.
 *
 * Two models:
 *
 * (a) "Allocate for me" — the source owns the call and has an allocator family (family.h) to
 *     forward to: interposed malloc/new (alloc.c, newdel.c), the GOT slots attach patches to them,
 *     and later entry hooks on an allocator linked into the binary (issue 35: one ml_family per
 *     hooked allocator, its originals reached through trampolines). Its fast paths are the inline
 *     functions below, written once for every family: an allocation subtracts its size from the
 *     thread's countdown and tail-calls the family; a free is one range compare. When the countdown
 *     runs out the ml_src_*_slow paths may serve a sampled block from the private range; a free
 *     through any entry of any family recognises it (ml_src_owns) and gives it to ml_src_free.
 *     Each entry of a new family calls: ML_COUNTDOWN_OR + f->x, else ml_src_malloc_slow /
 *     ml_src_calloc_slow / ml_src_realloc / ml_src_aligned; ml_src_owns + ml_src_free on free;
 *     ml_src_owns + ml_src_usable for a usable size.
 *
 * (b) "Observe" — the memory belongs to someone else: the report API (report.c) and, next,
 *     anonymous mmap (issue 31). The same countdown decides; a sampled event is recorded in a shadow
 *     block of the range (one byte, with the weights of the memory observed) remembered by the
 *     memory's address in a striped table consulted only by that source's free
 *     (ml_src_observe_free): free() of any family never pays for it.
 *
 * Both models end in ml_src_decide and ml_src_sample / ml_src_exact, tagged with the source's kind. */
#ifndef MEMLENS_SOURCE_H
#define MEMLENS_SOURCE_H
#include "../record/block.h"
#include "../record/range.h"
#include "family.h"

#pragma GCC visibility push(hidden)

/* ---- the one sampled path ---- */

/* The countdown ran out (or is not armed): re-arm it and say what to do with this allocation of
 * `size` bytes: ML_FORWARD, ML_SAMPLE, ML_EXACT or ML_BOOT (sample.h; ML_BOOT: ml_init is running
 * on this thread, serve from the boot arena). */
int ml_src_decide(size_t size);
/* ML_SAMPLE or ML_EXACT: serve a sampled block from the private range, record it and fire
 * otel_memory:alloc (record/usdt.h); NULL if the range is exhausted (the caller forwards; the
 * sample still counts, as `untracked`). */
void *ml_src_sample(enum ml_src_kind kind, size_t size, size_t align, int zero, uintptr_t ra);
/* The same for a block family f would have served: its usable size is f's for `size` (block.h). */
void *ml_src_sample_of(const struct ml_family *f, size_t size, size_t align, int zero, uintptr_t ra);
/* Record an allocation the source served itself, in exact mode (cumulative counts only: its free is
 * not seen). The malloc family's exact mode goes through ml_src_sample instead, which keeps the
 * live heap. */
void ml_src_exact(enum ml_src_kind kind, size_t size, uintptr_t ra);

/* ---- model (a): any family's malloc family ---- */

/* Is p a block of the private range (sampled, or the boot arena)? The free fast path. */
static inline int ml_src_owns(const void *p) { return ml_in_range(p); }
/* Free a block ml_src_owns. */
static inline void ml_src_free(void *p) { ml_sampled_free(p); }
/* The usable size of a block ml_src_owns: its family's for its size (block.h). */
static inline size_t ml_src_usable(void *p) { return ml_block_usable(ml_block_of(p)); }

void *ml_src_malloc_slow(struct ml_family *f, size_t size, uintptr_t ra);
/* calloc(n, s) whose countdown ran out; `total` = n·s (no overflow). */
void *ml_src_calloc_slow(struct ml_family *f, size_t n, size_t s, size_t total, uintptr_t ra);
void *ml_src_realloc_slow(struct ml_family *f, void *p, size_t n, uintptr_t ra);
enum { AL_POSIX, AL_ALIGNED, AL_MEMALIGN };
void *ml_src_aligned_slow(struct ml_family *f, int how, size_t align, size_t size, int *err, uintptr_t ra);

/* malloc with an explicit return address (ra: into the caller of the source's entry point). */
static inline void *ml_src_malloc(struct ml_family *f, size_t size, uintptr_t ra)
{
    ML_COUNTDOWN_OR(size, slow);
    return f->malloc(size);
slow:
    return ml_src_malloc_slow(f, size, ra);
}

/* realloc: a block of ours is never the family's; the countdown counts the new size. */
static inline void *ml_src_realloc(struct ml_family *f, void *p, size_t n, uintptr_t ra)
{
    if (likely(!ml_src_owns(p)) && likely((ml_tls.countdown -= (int64_t)n) > 0))
        return f->realloc(p, n);
    return ml_src_realloc_slow(f, p, n, ra);
}

/* posix_memalign, aligned_alloc or memalign (`how`) of family f, unsampled. *err: posix_memalign's
 * result (`err` is NULL for the others: a local whose address the call takes would cost their
 * fast path its tail call). */
static inline void *ml_src_forward_aligned(struct ml_family *f, int how, size_t align, size_t size, int *err)
{
    void *p = NULL;
    if (how == AL_POSIX)
        *err = f->posix_memalign(&p, align, size);
    else if (how == AL_ALIGNED)
        p = f->aligned_alloc(align, size);
    else
        p = f->memalign(align, size);
    return p;
}

/* The same through the countdown. */
static inline void *ml_src_aligned(struct ml_family *f, int how, size_t align, size_t size, int *err,
                                   uintptr_t ra)
{
    if (likely((ml_tls.countdown -= (int64_t)size) > 0))
        return ml_src_forward_aligned(f, how, align, size, err);
    return ml_src_aligned_slow(f, how, align, size, err, ra);
}

/* ---- model (b): observed memory ---- */

/* `size` bytes at p, allocated by someone else (NULL is ignored). */
void ml_src_observe_alloc(enum ml_src_kind kind, void *p, size_t size, uintptr_t ra);
/* The countdown ran out for `size` observed bytes: decide, and on a sample return its shadow block
 * (ml_src_free gives it back) for a source that keeps its own index of what it observes (mmap.c:
 * ranges, which munmap may cut). An exact record is counted here; NULL otherwise. */
void *ml_src_observe_sample(enum ml_src_kind kind, size_t size, uintptr_t ra);
/* p, observed before, is freed (a p never sampled costs one load). */
void ml_src_observe_free(enum ml_src_kind kind, void *p);

#pragma GCC visibility pop
#endif
