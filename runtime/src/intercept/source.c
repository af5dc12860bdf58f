/* The allocation-source seam (source.h explains the two models): the one sampled path every source
 * of allocations reaches, and model (a)'s slow paths written once for any allocator family.
 *
 * The slow paths run when a thread's countdown ran out (or a realloc met a block of ours); what they
 * forward goes to their family `f`, and what they sample comes from the private range, whichever
 * family it was asked of. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "../sample/cost.h"
#include "../sample/sample.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "../record/usdt.h"
#include "../unwind/unwind.h"
#include "boot.h"
#include "source.h"

/* ---- the one sampled path ---- */

int ml_src_decide(size_t size)
{
    ml_init();
    if (unlikely(ml_tls.in_init))
        return ML_BOOT;
    return ml_slow_decide(size);
}

/* The weights of this thread's last sample, for (w_size, w_R): programs allocate few distinct
 * sizes, and this saves an expm1 on most samples. */
static void weights(struct ml_thread *t, size_t size, uint64_t R)
{
    if (t->w_size == size && t->w_R == R)
        return;
    t->w_size = size;
    t->w_R = R;
    ml_weights(size, R, &t->w_fx, &t->w_bytes);
}


/* The interval this thread's decision was taken at: t->armed, ~0 in exact mode (rt.h), where a
 * record weighs what a sample at R = 0 would: one object, its size. */
static inline uint64_t armed_R(const struct ml_thread *t) { return t->armed == UINT64_MAX ? 0 : t->armed; }

/* A sample of `size` bytes with weights (w_fx, w_bytes) on stack `id`: the cumulative counts. */
static void count_alloc(uint32_t id, uint64_t w_fx, uint64_t w_bytes)
{
    if (id == ML_NO_STACK) {
        atomic_fetch_add_explicit(&ml_st->dropped, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&ml_st->dropped_bytes, w_bytes, memory_order_relaxed);
        return;
    }
    struct ml_stack *st = ml_stack_get(id);
    ml_stack_touch(st);
    atomic_fetch_add_explicit(&st->samples, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->alloc_fx, w_fx, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->alloc_bytes, w_bytes, memory_order_relaxed);
}

/* ML_SAMPLE and ML_EXACT both come here: exact mode serves every block from the range too, so that
 * its frees are seen and the live heap, peak, lifetimes and timeline are exact as well (a block
 * costs the range's header, 128 bytes, and the range lock). */
void *ml_src_sample(enum ml_src_kind kind, size_t size, size_t align, int zero, uintptr_t ra)
{
    (void)kind; /* TODO(issue 31): record ML_SRC_MMAP as a sample kind of its own */
    struct ml_thread *t = &ml_tls;
    /* Exact mode records every allocation: one in ML_COST_EXACT_EVERY is timed (cost.c) */
    uint64_t R = armed_R(t), times = R ? 1 : ML_COST_EXACT_EVERY;
    int timed = R || t->samples % ML_COST_EXACT_EVERY == 0;
    uint64_t c0 = timed ? ml_cost_begin() : 0;
    ml_state_own(); /* a fork child's first write to its table copies its parent's (state.c) */
    t->busy++;
    weights(t, size, R);
    uint64_t w_fx = t->w_fx, w_bytes = t->w_bytes;
    uint32_t id = ml_unwind_intern(ra, 1);
    void *p = ml_block_new(size, align, zero, id, w_fx, w_bytes, ra);
    /* The range is full, or cannot grow (an address-space limit): the caller serves the block from
     * the real allocator, and the sample still counts as allocated (as in exact mode), without
     * live tracking. */
    count_alloc(id, w_fx, w_bytes);
    if (!p)
        atomic_fetch_add_explicit(&ml_st->untracked, 1, memory_order_relaxed);
    ml_usdt_alloc(p, size, w_bytes);
    t->busy--;
    if (timed)
        ml_cost_end(c0, w_fx, times);
    return p;
}

void ml_src_exact(enum ml_src_kind kind, size_t size, uintptr_t ra)
{
    (void)kind; /* TODO(issue 31): as in ml_src_sample */
    struct ml_thread *t = &ml_tls;
    int timed = t->samples % ML_COST_EXACT_EVERY == 0; /* cost.c: one record in 64 */
    uint64_t c0 = timed ? ml_cost_begin() : 0;
    ml_state_own();
    t->busy++;
    weights(t, size, 0);
    count_alloc(ml_unwind_intern(ra, 1), t->w_fx, t->w_bytes);
    t->busy--;
    if (timed)
        ml_cost_end(c0, t->w_fx, ML_COST_EXACT_EVERY);
}

/* ---- model (a): the slow paths, for any family ---- */

ML_NOINLINE void *ml_src_malloc_slow(struct ml_family *f, size_t size, uintptr_t ra)
{
    switch (ml_src_decide(size)) {
    case ML_BOOT:
        return ml_boot_alloc(size);
    case ML_SAMPLE:
    case ML_EXACT: {
        void *p = ml_src_sample(f->kind, size, 0, 0, ra);
        if (p)
            return p;
        break;
    }
    }
    return f->malloc(size);
}

ML_NOINLINE void *ml_src_calloc_slow(struct ml_family *f, size_t n, size_t s, size_t total, uintptr_t ra)
{
    switch (ml_src_decide(total)) {
    case ML_BOOT:
        return ml_boot_alloc(total); /* boot memory is fresh, hence zero */
    case ML_SAMPLE:
    case ML_EXACT: {
        void *p = ml_src_sample(f->kind, total, 0, 1, ra);
        if (p)
            return p;
        break;
    }
    }
    return f->calloc(n, s);
}

/* A sampled block p reallocated to q, n bytes: to the probes, the free of p and, while q stays in
 * the range and sampling is on, an allocation of n bytes of weight n — block.c counts every
 * reallocation of a block in the range exactly in alloc_space. One that had to leave a full range
 * is the family's now, unsampled. */
static void usdt_realloc(void *p, void *q, size_t n)
{
    ml_usdt_free(p);
    if (ml_src_owns(q) && atomic_load_explicit(&ml_cfg.active, memory_order_relaxed))
        ml_usdt_alloc(q, n, n);
}

/* realloc of a block in our range: block.c resizes it in place or moves it within the range, and
 * counts the reallocation exactly (the countdown is for blocks outside the range: see block.c); a
 * block that cannot stay in a full range moves out to the family's malloc. */
static void *realloc_owned(struct ml_family *f, void *p, size_t n, uintptr_t ra)
{
    if (n == 0) {
        ml_src_free(p); /* glibc semantics: realloc(p, 0) frees and returns NULL */
        return NULL;
    }
    struct ml_block *b = ml_block_of(p);
    if (b->kind != ML_KIND_SAMPLED) { /* boot arena: never freed, just copied out */
        void *q = ml_src_malloc(f, n, ra);
        if (q)
            memcpy(q, p, b->size < n ? b->size : n);
        return q;
    }
    uint64_t c0 = ml_cost_begin(); /* the runtime's own account (cost.c) */
    void *q = ml_block_realloc(p, n, ra, f->malloc);
    ml_cost_end(c0, 0, 1);
    if (q)
        usdt_realloc(p, q, n);
    return q;
}

/* realloc of a block of ours, or of the family's whose countdown ran out (the size was already
 * subtracted). */
ML_NOINLINE void *ml_src_realloc_slow(struct ml_family *f, void *p, size_t n, uintptr_t ra)
{
    if (ml_src_owns(p))
        return realloc_owned(f, p, n, ra);
    if (!p)
        return ml_src_malloc_slow(f, n, ra);
    int d = ml_src_decide(n);
    if (d == ML_BOOT)
        return NULL;
    if (d == ML_SAMPLE || d == ML_EXACT) {
        void *q = ml_src_sample(f->kind, n, 0, 0, ra);
        if (q) {
            size_t old = f->malloc_usable_size(p);
            memcpy(q, p, old < n ? old : n);
            f->free(p);
            return q;
        }
    }
    return f->realloc(p, n);
}

ML_NOINLINE void *ml_src_aligned_slow(struct ml_family *f, int how, size_t align, size_t size, int *err,
                                      uintptr_t ra)
{
    int d = ml_src_decide(size);
    if (d == ML_BOOT) {
        if (err)
            *err = ENOMEM;
        return NULL;
    }
    if (d == ML_SAMPLE || d == ML_EXACT) {
        size_t a = align;
        if (a & (a - 1)) /* memalign rounds odd alignments up, like glibc */
            a = (size_t)1 << (64 - __builtin_clzll(a));
        void *p = ml_src_sample(f->kind, size, a, 0, ra);
        if (p)
            return p;
    }
    return ml_src_forward_aligned(f, how, align, size, err);
}
