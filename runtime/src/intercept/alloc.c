/* The interposed malloc family. Each fast path is: subtract the size from the thread's countdown
 * (initial-exec TLS), and if it is still positive, tail-call the next allocator. free() is one
 * unsigned range compare. Everything else lives out of line in the *_slow functions.
 *
 * The exported functions are built without a frame pointer (saves the push/mov/pop on every call);
 * they pass their return address down so every unwinder reports the caller of malloc first. They
 * start on a cache line of their own: where one began 48 bytes into a line, its fast path straddled
 * two and cost ~0.5 cycles more per malloc/free pair (fastpath.sh, an unrelated change moving it). */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../record/block.h"
#include "../record/range.h"
#include "../sample/cost.h"
#include "../sample/sample.h"
#include "alloc.h"

#define FAST __attribute__((optimize("omit-frame-pointer"), aligned(64)))
#define RA() ((uintptr_t)__builtin_return_address(0))

ML_NOINLINE void *ml_malloc_slow(size_t size, uintptr_t ra)
{
    switch (ml_slow_decide(size)) {
    case ML_BOOT:
        return ml_boot_alloc(size);
    case ML_SAMPLE: {
        void *p = ml_sample_alloc(size, 0, 0, ra);
        if (p)
            return p;
        break;
    }
    case ML_EXACT: {
        void *p = ml_real.malloc(size);
        if (p)
            ml_exact_record(size, ra);
        return p;
    }
    }
    return ml_real.malloc(size);
}

ML_EXPORT FAST void *malloc(size_t size)
{
    ML_COUNTDOWN_OR(size, slow);
    return ml_real.malloc(size);
slow:
    return ml_malloc_slow(size, RA());
}

ML_EXPORT FAST void free(void *p)
{
    if (unlikely(ml_in_range(p))) {
        ml_sampled_free(p);
        return;
    }
    ml_real.free(p);
}

static ML_NOINLINE void *calloc_slow(size_t n, size_t s, size_t total, uintptr_t ra)
{
    switch (ml_slow_decide(total)) {
    case ML_BOOT:
        return ml_boot_alloc(total); /* boot memory is fresh, hence zero */
    case ML_SAMPLE: {
        void *p = ml_sample_alloc(total, 0, 1, ra);
        if (p)
            return p;
        break;
    }
    case ML_EXACT: {
        void *p = ml_real.calloc(n, s);
        if (p)
            ml_exact_record(total, ra);
        return p;
    }
    }
    return ml_real.calloc(n, s);
}

ML_EXPORT FAST void *calloc(size_t n, size_t s)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(n, s, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    ML_COUNTDOWN_OR(total, slow);
    return ml_real.calloc(n, s);
slow:
    return calloc_slow(n, s, total, RA());
}

/* realloc of a block in our range: block.c resizes it in place or moves it within the range, and
 * counts the reallocation exactly (the countdown is for blocks outside the range: see block.c). */
static void *realloc_ours(void *p, size_t n, uintptr_t ra)
{
    if (n == 0) {
        ml_sampled_free(p); /* glibc semantics: realloc(p, 0) frees and returns NULL */
        return NULL;
    }
    struct ml_block *b = ml_block_of(p);
    if (b->kind != ML_KIND_SAMPLED) { /* boot arena: never freed, just copied out */
        void *q = ml_malloc_from(n, ra);
        if (q)
            memcpy(q, p, b->size < n ? b->size : n);
        return q;
    }
    uint64_t c0 = ml_cost_begin(); /* the runtime's own account (cost.c) */
    void *q = ml_block_realloc(p, n, ra);
    ml_cost_end(c0, 0, 1);
    return q;
}

/* realloc of an unsampled block whose countdown ran out (the size was already subtracted). */
static ML_NOINLINE void *realloc_slow(void *p, size_t n, uintptr_t ra)
{
    if (ml_in_range(p))
        return realloc_ours(p, n, ra);
    if (!p)
        return ml_malloc_slow(n, ra);
    int d = ml_slow_decide(n);
    if (d == ML_BOOT)
        return NULL;
    if (d == ML_SAMPLE) {
        void *q = ml_sample_alloc(n, 0, 0, ra);
        if (q) {
            size_t old = ml_real.malloc_usable_size(p);
            memcpy(q, p, old < n ? old : n);
            ml_real.free(p);
            return q;
        }
    }
    void *q = ml_real.realloc(p, n);
    if (q && d == ML_EXACT)
        ml_exact_record(n, ra);
    return q;
}

static inline void *realloc_from(void *p, size_t n, uintptr_t ra)
{
    if (likely(!ml_in_range(p)) && likely((ml_tls.countdown -= (int64_t)n) > 0))
        return ml_real.realloc(p, n);
    return realloc_slow(p, n, ra);
}

ML_EXPORT FAST void *realloc(void *p, size_t n) { return realloc_from(p, n, RA()); }

ML_EXPORT void *reallocarray(void *p, size_t n, size_t s)
{
    size_t total;
    if (__builtin_mul_overflow(n, s, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc_from(p, total, RA());
}

static void *forward_aligned(int how, size_t align, size_t size, int *err)
{
    void *p = NULL;
    if (how == AL_POSIX)
        *err = ml_real.posix_memalign(&p, align, size);
    else if (how == AL_ALIGNED)
        p = ml_real.aligned_alloc(align, size);
    else
        p = ml_real.memalign(align, size);
    return p;
}

ML_NOINLINE void *ml_aligned_slow(int how, size_t align, size_t size, int *err, uintptr_t ra)
{
    int d = ml_slow_decide(size);
    if (d == ML_BOOT) {
        *err = ENOMEM;
        return NULL;
    }
    if (d == ML_SAMPLE) {
        size_t a = align;
        if (a & (a - 1)) /* memalign rounds odd alignments up, like glibc */
            a = (size_t)1 << (64 - __builtin_clzll(a));
        void *p = ml_sample_alloc(size, a, 0, ra);
        if (p)
            return p;
    }
    void *p = forward_aligned(how, align, size, err);
    if (p && d == ML_EXACT)
        ml_exact_record(size, ra);
    return p;
}

void *ml_aligned_from(int how, size_t align, size_t size, int *err, uintptr_t ra)
{
    if (likely((ml_tls.countdown -= (int64_t)size) > 0))
        return forward_aligned(how, align, size, err);
    return ml_aligned_slow(how, align, size, err, ra);
}

ML_EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    int err = 0;
    void *p = ml_aligned_from(AL_POSIX, align, size, &err, RA());
    if (!p)
        return err ? err : ENOMEM;
    *out = p;
    return 0;
}

ML_EXPORT void *aligned_alloc(size_t align, size_t size)
{
    if (align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    int err = 0;
    return ml_aligned_from(AL_ALIGNED, align, size, &err, RA());
}

ML_EXPORT void *memalign(size_t align, size_t size)
{
    int err = 0;
    return ml_aligned_from(AL_MEMALIGN, align, size, &err, RA());
}

/* valloc/pvalloc forward to memalign: an allocator preloaded after us may not define them, and
 * mixing glibc's valloc with another allocator's free would corrupt both heaps. */
ML_EXPORT void *valloc(size_t size)
{
    int err = 0;
    return ml_aligned_from(AL_MEMALIGN, (size_t)sysconf(_SC_PAGESIZE), size, &err, RA());
}

ML_EXPORT void *pvalloc(size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t rounded = (size + page - 1) & ~(page - 1);
    if (rounded < size) {
        errno = ENOMEM;
        return NULL;
    }
    int err = 0;
    return ml_aligned_from(AL_MEMALIGN, page, rounded ? rounded : page, &err, RA());
}

ML_EXPORT size_t malloc_usable_size(void *p)
{
    if (ml_in_range(p))
        return ml_block_of(p)->size;
    return ml_real.malloc_usable_size(p);
}
