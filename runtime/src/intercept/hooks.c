/* The hooks on allocators linked into a program (hooks.h): for each of HK_SLOTS allocators and each
 * row of HK_ROWS, a function the entry point's jump leads to (patch.c). Each is the seam's model (a)
 * (source.h) over the slot's family: an allocation subtracts its size from the thread's countdown
 * and tail-calls the original (the trampoline), a free is one range compare. Slow paths are shared
 * by shape, out of line.
 *
 * The hook is reached by jumps only (entry -> stub -> hook), so on entry the return address is into
 * the caller of the allocator's entry point: stacks start there, as for interposed malloc. Extra
 * arguments (nothrow tags, sizes and alignments of sized frees) are passed through untouched. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "../sample/sample.h"
#include "hooks.h"
#include "source.h"

#define FAST __attribute__((optimize("omit-frame-pointer")))
#define RA() ((uintptr_t)__builtin_return_address(0))
#define PAGE 4096

struct hk_slot hk_slots[HK_SLOTS];

#define HK_ROW(S, id, tab, name, shape, p1) {name, tab, shape, p1},
const struct hk_row hk_rows[HK_NROWS] = {HK_ROWS(HK_ROW, 0)};
#undef HK_ROW

typedef void *(*f_p_n)(void *, size_t);
typedef void *(*f_n_x)(size_t, uintptr_t);

/* ---- slow paths: the countdown ran out ---- */

/* How to call an allocating entry's original: its shape and arguments. */
struct hk_call { int shape; uintptr_t a[3]; int err; };

static void *call_alloc(void *f, struct hk_call *c)
{
    uintptr_t *a = c->a;
    switch (c->shape) {
    case SH_MALLOC: return ((void *(*)(size_t, uintptr_t))f)(a[0], a[1]);
    case SH_CALLOC: return ((void *(*)(size_t, size_t, uintptr_t))f)(a[0], a[1], a[2]);
    case SH_MEMALIGN: return ((void *(*)(size_t, size_t))f)(a[0], a[1]);
    case SH_ALIGNED: return ((void *(*)(size_t, size_t, uintptr_t))f)(a[0], a[1], a[2]);
    case SH_CALLOC_AL: return ((void *(*)(size_t, size_t, size_t))f)(a[0], a[1], a[2]);
    case SH_MALLOCX: return ((void *(*)(size_t, int))f)(a[0], (int)a[1]);
    case SH_POSIX: {
        void *p = NULL;
        c->err = ((int (*)(void **, size_t, size_t))f)(&p, a[1], a[2]);
        return c->err ? NULL : p;
    }
    }
    return NULL;
}

/* An allocation of `size` bytes (aligned to `align`, zeroed if `zero`): sampled from the range, or
 * forwarded to the original. */
static ML_NOINLINE void *alloc_slow(struct hk_slot *s, int id, size_t size, size_t align, int zero, struct hk_call *c,
                                    uintptr_t ra)
{
    size_t sz = size ? size : 1;
    int d = ml_src_decide(sz);
    if (d == ML_SAMPLE) {
        void *p = ml_src_sample_of(&s->fam, sz, align, zero, ra);
        if (p)
            return p;
    }
    void *p = call_alloc(s->orig[id], c);
    if (p && d == ML_EXACT)
        ml_src_exact(ML_SRC_HOOKED, sz, ra);
    return p;
}

static void *call_realloc(void *f, int shape, void *p, uintptr_t a1, uintptr_t a2)
{
    if (shape == SH_REALLOC)
        return ((f_p_n)f)(p, a1);
    return ((void *(*)(void *, uintptr_t, uintptr_t))f)(p, a1, a2);
}

/* A block of ours reallocated to n bytes: resized or moved within the range (block.c), or, when it
 * needs an alignment above the range's 16, moved to a new sampled block. */
static void *realloc_owned(struct hk_slot *s, void *p, size_t n, size_t align, int zero, uintptr_t ra)
{
    if (n == 0) {
        ml_src_free(p);
        return NULL;
    }
    size_t old = ml_src_usable(p);
    void *q;
    if (align > 16) {
        q = ml_src_sample(ML_SRC_HOOKED, n, align, 0, ra);
        if (q) {
            memcpy(q, p, old < n ? old : n);
            ml_src_free(p);
        }
    } else {
        q = ml_src_realloc_slow(&s->fam, p, n, ra);
    }
    if (q && zero && n > old)
        memset((char *)q + old, 0, n - old);
    return q;
}

/* Free q, n bytes the allocator of slot s just made (flags: jemalloc's, for its sized free), with
 * whichever free the program linked in (Rust keeps only what it calls: _rjem_sdallocx, no free). */
static void slot_free_sized(struct hk_slot *s, void *q, size_t n, int flags)
{
    void *const *o = s->orig;
    if (o[HK_STD_sdallocx])
        ((void (*)(void *, size_t, int))o[HK_STD_sdallocx])(q, n, flags);
    else if (o[HK_STD_dallocx])
        ((void (*)(void *, int))o[HK_STD_dallocx])(q, flags);
    else
        s->fam.free(q);
}

/* realloc of the allocator's own block p whose countdown ran out: sampled, or forwarded. A sampled
 * one is reallocated by the allocator first (it knows p's size, we do not), then copied into the
 * range and the allocator's copy freed: one copy more, on sampled reallocations only. */
static ML_NOINLINE void *realloc_slow(struct hk_slot *s, int id, void *p, size_t n, size_t align, int zero,
                                      uintptr_t a1, uintptr_t a2, uintptr_t ra)
{
    int shape = hk_rows[id].shape;
    if (ml_src_owns(p))
        return realloc_owned(s, p, n, align, zero, ra);
    int d = n ? ml_src_decide(n) : ML_FORWARD;
    if (d == ML_SAMPLE && !p) { /* realloc(NULL, n) allocates */
        void *q = ml_src_sample_of(&s->fam, n, align, zero, ra);
        if (q)
            return q;
    }
    void *q = call_realloc(s->orig[id], shape, p, a1, a2);
    if (q && d == ML_SAMPLE && p) {
        void *r = ml_src_sample_of(&s->fam, n, align, 0, ra);
        if (r) {
            memcpy(r, q, n);
            slot_free_sized(s, q, n, shape == SH_RALLOCX ? (int)a2 : 0);
            return r;
        }
    }
    if (q && d == ML_EXACT)
        ml_src_exact(ML_SRC_HOOKED, n, ra);
    return q;
}

/* The family's malloc and free (family.h) for the seam's slow paths (a sampled block leaving a full
 * range), from whichever entry points the program has. */
static void *slot_malloc(struct hk_slot *s, size_t n)
{
    void *const *o = s->orig;
    if (o[HK_STD_malloc])
        return ((void *(*)(size_t))o[HK_STD_malloc])(n);
    if (o[HK_STD_mallocx])
        return ((void *(*)(size_t, int))o[HK_STD_mallocx])(n, 0);
    if (o[HK_MI_malloc])
        return ((void *(*)(size_t))o[HK_MI_malloc])(n);
    if (o[HK_MI_malloc_aligned])
        return ((void *(*)(size_t, size_t))o[HK_MI_malloc_aligned])(n, 16);
    if (o[HK_TC_malloc])
        return ((void *(*)(size_t))o[HK_TC_malloc])(n);
    return NULL;
}

static void slot_free(struct hk_slot *s, void *p)
{
    void *const *o = s->orig;
    int rows[] = {HK_STD_free, HK_MI_free, HK_TC_free, HK_STD_dallocx};
    for (unsigned i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (o[rows[i]]) {
            ((void (*)(void *, uintptr_t))o[rows[i]])(p, 0);
            return;
        }
}

#define SLOT_FNS(S)                                                                                    \
    static void *slot_malloc_##S(size_t n) { return slot_malloc(&hk_slots[S], n); }                   \
    static void slot_free_##S(void *p) { slot_free(&hk_slots[S], p); }
SLOT_FNS(0)
SLOT_FNS(1)
SLOT_FNS(2)

void hk_slot_basics(int s)
{
    static void *(*const m[HK_SLOTS])(size_t) = {slot_malloc_0, slot_malloc_1, slot_malloc_2};
    static void (*const f[HK_SLOTS])(void *) = {slot_free_0, slot_free_1, slot_free_2};
    hk_slots[s].fam.malloc = m[s];
    hk_slots[s].fam.free = f[s];
}

/* ---- the hooks, by shape ---- */

static inline size_t mallocx_align(int flags) { return flags & 0x3f ? (size_t)1 << (flags & 0x3f) : 0; }

#define ORIG(S, id, T) ((T)hk_slots[S].orig[HK_##id])
#define SLOW_ALLOC(S, id, size, align, zero, ...)                                                             \
    do {                                                                                               \
        struct hk_call c = {hk_rows[HK_##id].shape, {__VA_ARGS__}, 0};                                 \
        return alloc_slow(&hk_slots[S], HK_##id, size, align, zero, &c, RA());                         \
    } while (0)

#define FN_SH_MALLOC(S, id, p1)                                                                        \
    static FAST void *hk_##S##_##id(size_t n, uintptr_t x)                                             \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, f_n_x)(n, x);                                                                      \
    slow:                                                                                              \
        SLOW_ALLOC(S, id, n, (p1) & 2 ? PAGE : 0, (p1) & 1, n, x);                                            \
    }
#define FN_SH_CALLOC(S, id, p1)                                                                        \
    static FAST void *hk_##S##_##id(size_t n, size_t sz, uintptr_t x)                                  \
    {                                                                                                  \
        size_t t;                                                                                      \
        if (unlikely(__builtin_mul_overflow(n, sz, &t)))                                               \
            return ORIG(S, id, void *(*)(size_t, size_t, uintptr_t))(n, sz, x);                               \
        ML_COUNTDOWN_OR(t, slow);                                                                      \
        return ORIG(S, id, void *(*)(size_t, size_t, uintptr_t))(n, sz, x);                                   \
    slow:                                                                                              \
        SLOW_ALLOC(S, id, t, 0, p1, n, sz, x);                                                                \
    }
#define FN_SH_MEMALIGN(S, id, p1)                                                                      \
    static FAST void *hk_##S##_##id(size_t al, size_t n)                                               \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, void *(*)(size_t, size_t))(al, n);                                                 \
    slow:                                                                                              \
        if (al & (al - 1)) /* not a power of two: the allocator's answer */                            \
            return ORIG(S, id, void *(*)(size_t, size_t))(al, n);                                             \
        SLOW_ALLOC(S, id, n, al, 0, al, n);                                                                   \
    }
#define FN_SH_ALIGNED(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(size_t n, size_t al, uintptr_t x)                                  \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, void *(*)(size_t, size_t, uintptr_t))(n, al, x);                                   \
    slow:                                                                                              \
        if (al & (al - 1))                                                                             \
            return ORIG(S, id, void *(*)(size_t, size_t, uintptr_t))(n, al, x);                               \
        SLOW_ALLOC(S, id, n, al, p1, n, al, x);                                                               \
    }
#define FN_SH_CALLOC_AL(S, id, p1)                                                                     \
    static FAST void *hk_##S##_##id(size_t n, size_t sz, size_t al)                                    \
    {                                                                                                  \
        size_t t;                                                                                      \
        if (unlikely(__builtin_mul_overflow(n, sz, &t)) || (al & (al - 1)))                            \
            return ORIG(S, id, void *(*)(size_t, size_t, size_t))(n, sz, al);                                 \
        ML_COUNTDOWN_OR(t, slow);                                                                      \
        return ORIG(S, id, void *(*)(size_t, size_t, size_t))(n, sz, al);                                     \
    slow:                                                                                              \
        SLOW_ALLOC(S, id, t, al, 1, n, sz, al);                                                               \
    }
#define FN_SH_POSIX(S, id, p1)                                                                         \
    static FAST int hk_##S##_##id(void **out, size_t al, size_t n)                                     \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, int (*)(void **, size_t, size_t))(out, al, n);                                     \
    slow:                                                                                              \
        if (al < sizeof(void *) || (al & (al - 1)))                                                    \
            return ORIG(S, id, int (*)(void **, size_t, size_t))(out, al, n);                                 \
        struct hk_call c = {SH_POSIX, {0, al, n}, 0};                                                  \
        void *p = alloc_slow(&hk_slots[S], HK_##id, n, al, 0, &c, RA());                               \
        if (!p)                                                                                        \
            return c.err ? c.err : ENOMEM;                                                             \
        *out = p;                                                                                      \
        return 0;                                                                                      \
    }
#define FN_SH_MALLOCX(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(size_t n, int fl)                                                  \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, void *(*)(size_t, int))(n, fl);                                                    \
    slow:                                                                                              \
        SLOW_ALLOC(S, id, n, mallocx_align(fl), fl & 0x40, n, (uintptr_t)fl);                                 \
    }
#define REALLOC_BODY(S, id, n, align, zero, a1, a2, call)                                              \
    if (likely(!ml_src_owns(p)) && likely((ml_tls.countdown -= (int64_t)(n)) > 0))                     \
        return call;                                                                                   \
    return realloc_slow(&hk_slots[S], HK_##id, p, n, align, zero, a1, a2, RA());
#define FN_SH_REALLOC(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(void *p, size_t n)                                                 \
    {                                                                                                  \
        REALLOC_BODY(S, id, n, 0, p1, n, 0, ORIG(S, id, f_p_n)(p, n))                                         \
    }
#define FN_SH_REALLOCN(S, id, p1)                                                                      \
    static FAST void *hk_##S##_##id(void *p, size_t n, size_t sz)                                      \
    {                                                                                                  \
        size_t t;                                                                                      \
        if (unlikely(__builtin_mul_overflow(n, sz, &t)))                                               \
            return ORIG(S, id, void *(*)(void *, size_t, size_t))(p, n, sz);                                  \
        REALLOC_BODY(S, id, t, 0, p1, n, sz, ORIG(S, id, void *(*)(void *, size_t, size_t))(p, n, sz))        \
    }
#define FN_SH_REALLOC_AL(S, id, p1)                                                                    \
    static FAST void *hk_##S##_##id(void *p, size_t n, size_t al)                                      \
    {                                                                                                  \
        REALLOC_BODY(S, id, n, al, p1, n, al, ORIG(S, id, void *(*)(void *, size_t, size_t))(p, n, al))       \
    }
#define FN_SH_RALLOCX(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(void *p, size_t n, int fl)                                         \
    {                                                                                                  \
        REALLOC_BODY(S, id, n, mallocx_align(fl), fl & 0x40, n, (uintptr_t)fl,                         \
                     ORIG(S, id, void *(*)(void *, size_t, int))(p, n, fl))                                   \
    }
#define FN_SH_FREE(S, id, p1)                                                                          \
    static FAST void hk_##S##_##id(void *p, uintptr_t x, uintptr_t y)                                  \
    {                                                                                                  \
        if (unlikely(ml_src_owns(p))) {                                                                \
            ml_src_free(p);                                                                            \
            return;                                                                                    \
        }                                                                                              \
        ORIG(S, id, void (*)(void *, uintptr_t, uintptr_t))(p, x, y);                                         \
    }
#define FN_SH_USABLE(S, id, p1)                                                                        \
    static size_t hk_##S##_##id(void *p, uintptr_t x)                                                  \
    {                                                                                                  \
        if (ml_src_owns(p))                                                                            \
            return ml_src_usable(p);                                                                   \
        return ORIG(S, id, size_t(*)(void *, uintptr_t))(p, x);                                               \
    }
#define FN_SH_XALLOCX(S, id, p1)                                                                       \
    static size_t hk_##S##_##id(void *p, size_t n, size_t extra, int fl)                               \
    {                                                                                                  \
        if (ml_src_owns(p)) /* a block of ours is not resized in place by the allocator */             \
            return ml_src_usable(p);                                                                   \
        return ORIG(S, id, size_t(*)(void *, size_t, size_t, int))(p, n, extra, fl);                          \
    }
#define FN_SH_EXPAND(S, id, p1)                                                                        \
    static void *hk_##S##_##id(void *p, size_t n)                                                      \
    {                                                                                                  \
        if (ml_src_owns(p))                                                                            \
            return n <= ml_src_usable(p) ? p : NULL;                                                   \
        return ORIG(S, id, f_p_n)(p, n);                                                                      \
    }

/* Guards of the reallocating rows, for when their hooks stop counting (ml_hooks_counting): a block
 * of ours still never reaches the allocator. Other rows have none (their original serves). */
#define GUARD(S, id, p1, params, n, align, call)                                                       \
    static void *hkg_##S##_##id params                                                                 \
    {                                                                                                  \
        if (unlikely(ml_src_owns(p)))                                                                  \
            return realloc_owned(&hk_slots[S], p, n, align, p1, RA());                                 \
        return call;                                                                                   \
    }
#define G_SH_REALLOC(S, id, p1) GUARD(S, id, p1, (void *p, size_t n), n, 0, ORIG(S, id, f_p_n)(p, n))
#define G_SH_REALLOCN(S, id, p1)                                                                       \
    GUARD(S, id, p1, (void *p, size_t n, size_t sz), n * sz, 0,                                        \
          ORIG(S, id, void *(*)(void *, size_t, size_t))(p, n, sz))
#define G_SH_REALLOC_AL(S, id, p1)                                                                     \
    GUARD(S, id, p1, (void *p, size_t n, size_t al), n, al, ORIG(S, id, void *(*)(void *, size_t, size_t))(p, n, al))
#define G_SH_RALLOCX(S, id, p1)                                                                        \
    GUARD(S, id, (fl & 0x40) != 0, (void *p, size_t n, int fl), n, mallocx_align(fl),                  \
          ORIG(S, id, void *(*)(void *, size_t, int))(p, n, fl))
#define G_NONE(S, id, p1)
#define G_SH_MALLOC G_NONE
#define G_SH_CALLOC G_NONE
#define G_SH_MEMALIGN G_NONE
#define G_SH_ALIGNED G_NONE
#define G_SH_CALLOC_AL G_NONE
#define G_SH_POSIX G_NONE
#define G_SH_MALLOCX G_NONE
#define G_SH_FREE G_NONE
#define G_SH_USABLE G_NONE
#define G_SH_XALLOCX G_NONE
#define G_SH_EXPAND G_NONE

#define HK_FN(S, id, tab, name, shape, p1) FN_##shape(S, id, p1) G_##shape(S, id, p1)
HK_ROWS(HK_FN, 0)
HK_ROWS(HK_FN, 1)
HK_ROWS(HK_FN, 2)
#undef HK_FN

#define HK_PTR(S, id, tab, name, shape, p1) (void *)hk_##S##_##id,
static void *const hooks[HK_SLOTS][HK_NROWS] = {{HK_ROWS(HK_PTR, 0)}, {HK_ROWS(HK_PTR, 1)}, {HK_ROWS(HK_PTR, 2)}};
#undef HK_PTR

#define P_SH_REALLOC(S, id) (void *)hkg_##S##_##id
#define P_SH_REALLOCN P_SH_REALLOC
#define P_SH_REALLOC_AL P_SH_REALLOC
#define P_SH_RALLOCX P_SH_REALLOC
#define P_NONE(S, id) NULL
#define P_SH_MALLOC P_NONE
#define P_SH_CALLOC P_NONE
#define P_SH_MEMALIGN P_NONE
#define P_SH_ALIGNED P_NONE
#define P_SH_CALLOC_AL P_NONE
#define P_SH_POSIX P_NONE
#define P_SH_MALLOCX P_NONE
#define P_SH_FREE P_NONE
#define P_SH_USABLE P_NONE
#define P_SH_XALLOCX P_NONE
#define P_SH_EXPAND P_NONE
#define HK_GPTR(S, id, tab, name, shape, p1) P_##shape(S, id),
static void *const guards[HK_SLOTS][HK_NROWS] = {{HK_ROWS(HK_GPTR, 0)}, {HK_ROWS(HK_GPTR, 1)}, {HK_ROWS(HK_GPTR, 2)}};
#undef HK_GPTR

void *hk_hook(int s, int id) { return hooks[s][id]; }
void *hk_guard(int s, int id) { return guards[s][id]; }
