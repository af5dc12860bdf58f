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

#include "../record/range.h"
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

/* ---- what `memlens detach` reads with every thread stopped ---- */

/* Whether the entry points that take a pointer (free, realloc, usable size) may get their original
 * bytes back: only when no sampled block is live (it would reach the allocator) and no hook is
 * between deciding to sample and the block's creation. crates/memlens-attach/src/hooks.rs reads
 * this with every thread stopped, after sampling was switched off: `inflight` counts the hooks
 * taking a sample now; `live` points at the range's live bytes. Keep the layout in step there. */
#define QUIET_MAGIC 0x6d6c717569657431ull /* "mlquiet1" */
struct ml_hooks_quiet {
    uint64_t magic;
    _Atomic int64_t inflight;
    const _Atomic int64_t *live;
};
ML_EXPORT struct ml_hooks_quiet memlens_hooks_quiet = {QUIET_MAGIC, 0, NULL};

/* Enter a sampled allocation: 0 if sampling was switched off meanwhile (the caller forwards). The
 * count goes up before `active` is read again, so a detach that saw it 0 with every thread stopped
 * and sampling off knows no sampled block is about to appear. On sampled calls only. */
static int sample_begin(void)
{
    atomic_fetch_add(&memlens_hooks_quiet.inflight, 1);
    if (atomic_load(&ml_cfg.active))
        return 1;
    atomic_fetch_sub(&memlens_hooks_quiet.inflight, 1);
    return 0;
}
static void sample_end(void) { atomic_fetch_sub(&memlens_hooks_quiet.inflight, 1); }

/* ---- slow paths: the countdown ran out ---- */

/* The slow paths are tail-called from the hooks with every argument in a register (at most six),
 * slot and row packed into `sid`: the hook keeps no frame then, and the slow path's return address
 * is the caller's, where the dwarf unwinder starts (unwind/dwarf.c finds its first frame by that
 * return address; a hook that called instead would send every sampled stack to libgcc's unwinder,
 * ~20 times slower). */
#define SID(S, id) ((S) << 8 | HK_##id)
#define SID_SLOT(sid) (&hk_slots[(sid) >> 8])
#define SID_ROW(sid) ((sid) & 0xff)

static inline size_t mallocx_align(int flags) { return flags & 0x3f ? (size_t)1 << (flags & 0x3f) : 0; }

/* What an allocating entry point asks for, from its shape and arguments (the hook has checked
 * calloc's product for overflow and the alignment for a power of two). */
struct hk_ask { size_t size, align; int zero; };
static struct hk_ask ask_of(int id, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3)
{
    const struct hk_row *r = &hk_rows[id];
    switch (r->shape) {
    case SH_MALLOC: return (struct hk_ask){a0, r->p1 & 2 ? PAGE : 0, r->p1 & 1};
    case SH_CALLOC: return (struct hk_ask){a0 * a1, 0, r->p1 & 1};
    case SH_MEMALIGN: return (struct hk_ask){a1, a0, 0};
    case SH_ALIGNED: return (struct hk_ask){a0, a1, r->p1 & 1};
    case SH_CALLOC_AL: return (struct hk_ask){a0 * a1, a2, 1};
    case SH_MALLOCX: return (struct hk_ask){a0, mallocx_align((int)a1), ((int)a1 & 0x40) != 0};
    case SH_POSIX: return (struct hk_ask){a2, a1, 0};
    case SH_HMALLOC: return (struct hk_ask){a1, 0, r->p1 & 1};
    case SH_HCALLOC: return (struct hk_ask){a1 * a2, 0, r->p1 & 1};
    case SH_HALIGNED: return (struct hk_ask){a1, a2, r->p1 & 1};
    case SH_HCALLOC_AL: return (struct hk_ask){a1 * a2, a3, 1};
    }
    return (struct hk_ask){a0, 0, 0};
}

static void *call_alloc(void *f, int shape, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3)
{
    switch (shape) {
    case SH_MALLOC: return ((void *(*)(size_t, uintptr_t))f)(a0, a1);
    case SH_MEMALIGN: return ((void *(*)(size_t, size_t))f)(a0, a1);
    case SH_MALLOCX: return ((void *(*)(size_t, int))f)(a0, (int)a1);
    }
    if (shape == SH_HCALLOC_AL)
        return ((void *(*)(uintptr_t, uintptr_t, uintptr_t, uintptr_t))f)(a0, a1, a2, a3);
    return ((void *(*)(uintptr_t, uintptr_t, uintptr_t))f)(a0, a1, a2);
}

/* ---- mimalloc's heaps ---- */

/* The thread's backing heap of slot s's mimalloc (never destroyed: mi_heap_destroy of it only
 * deletes), or NULL. */
static void *backing(const struct hk_slot *s)
{
    void *(*get)(void) = (void *(*)(void))s->orig[HK_MI_heap_get_backing];
    return get ? get() : NULL;
}

/* The sampled block p was served for a call of `shape` (heap: its first argument): it remembers
 * the mimalloc heap the call allocates from — the one passed, or for the heap-less entry points the
 * thread's default heap (mi_heap_set_default may have made it one of the program's) — unless that
 * is the backing heap (block.h). Sampled calls only. */
static void heap_mark(const struct hk_slot *s, void *p, int shape, uintptr_t heap)
{
    void *(*dflt)(void) = (void *(*)(void))s->orig[HK_MI_heap_get_default];
    if (!p || !ml_src_owns(p) || (!hk_heap_first(shape) && !dflt))
        return;
    void *h = hk_heap_first(shape) ? (void *)heap : dflt();
    ml_block_set_heap(p, h == backing(s) ? NULL : h);
}

/* mi_heap_destroy (destroyed = 1: after the original ran; h is only a key then) or mi_heap_delete
 * of h (before it). */
static void heap_gone(const struct hk_slot *s, void *h, int destroyed)
{
    if (h && h != backing(s))
        ml_blocks_heap_gone(h, destroyed);
}

/* The heaps made without allow_destroy (mi_heap_new_ex(…, false, …), mi_heap_new_in_arena), which
 * mi_heap_destroy only deletes: their blocks stay live in the backing heap. mi_heap_destroy cannot
 * be seen to delete (it jumps into a part of mi_heap_delete that GCC split off, past the hooked
 * entry: mi_heap_delete.part.0), so the heaps are remembered when they are made. A fixed table in
 * static memory (the runtime allocates through nothing it hooks), lock-free: a heap is made,
 * destroyed and deleted by its own thread. Full, a heap is not remembered and its destroy frees
 * its sampled blocks, as for any heap (docs/allocators.md). Only heap creation and destruction
 * touch it. */
#define KEPT_HEAPS 64
static void *_Atomic kept_heaps[KEPT_HEAPS];
static _Atomic int kept_n; /* entries in use: none, and a destroy or delete looks no further */

/* Forget h if it is remembered: 1 if it was. */
static int kept_forget(void *h)
{
    if (!h || !atomic_load_explicit(&kept_n, memory_order_relaxed))
        return 0;
    for (int i = 0; i < KEPT_HEAPS; i++) {
        void *want = h;
        if (atomic_load_explicit(&kept_heaps[i], memory_order_relaxed) == h &&
            atomic_compare_exchange_strong(&kept_heaps[i], &want, NULL)) {
            atomic_fetch_sub(&kept_n, 1);
            return 1;
        }
    }
    return 0;
}

/* A heap h was made (NULL: it was not): remembered if mi_heap_destroy will only delete it, else
 * forgotten (a heap that was remembered at that address and freed unseen, at a thread's end). */
static void heap_made(void *h, int only_deleted)
{
    kept_forget(h);
    if (!h || !only_deleted)
        return;
    for (int i = 0; i < KEPT_HEAPS; i++) {
        void *none = NULL;
        if (atomic_compare_exchange_strong(&kept_heaps[i], &none, h)) {
            atomic_fetch_add(&kept_n, 1);
            return;
        }
    }
}

/* mi_heap_destroy of h through `orig`: a heap mimalloc only deletes is deleted (its sampled blocks
 * go to the backing heap first), another one destroyed (they are freed after the original ran). */
static void heap_destroy(const struct hk_slot *s, void *h, void (*orig)(void *))
{
    if (kept_forget(h)) {
        heap_gone(s, h, 0);
        orig(h);
        return;
    }
    orig(h);
    heap_gone(s, h, 1);
}

/* A block of `size` sampled from the range for slot s's entry point of `shape` (heap: its first
 * argument), or NULL (sampling was switched off meanwhile, or the range is full): the caller
 * forwards. */
static void *sample_hooked(struct hk_slot *s, int shape, size_t size, size_t align, int zero, uintptr_t heap,
                           uintptr_t ra)
{
    if (!sample_begin())
        return NULL;
    void *p = ml_src_sample_of(&s->fam, size, align, zero, ra);
    sample_end();
    heap_mark(s, p, shape, heap);
    return p;
}

/* The countdown ran out: the allocation asked for is sampled from the range, or forwarded to the
 * original. Returns the block; for posix_memalign (`err`), *err is its result and the block is
 * stored through a0. */
static void *alloc_decide(int sid, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t ra,
                          int *err)
{
    int id = SID_ROW(sid);
    struct hk_ask k = ask_of(id, a0, a1, a2, a3);
    size_t sz = k.size ? k.size : 1;
    int d = ml_src_decide(sz);
    if (d == ML_SAMPLE) {
        void *p = sample_hooked(SID_SLOT(sid), hk_rows[id].shape, sz, k.align, k.zero, a0, ra);
        if (p)
            return p;
    }
    void *f = SID_SLOT(sid)->orig[id], *p;
    if (err) {
        *err = ((int (*)(void **, size_t, size_t))f)((void **)a0, a1, a2);
        p = *err ? NULL : *(void **)a0;
    } else {
        p = call_alloc(f, hk_rows[id].shape, a0, a1, a2, a3);
    }
    if (p && d == ML_EXACT)
        ml_src_exact(ML_SRC_HOOKED, sz, ra);
    return p;
}

static ML_NOINLINE void *alloc_slow(int sid, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t ra)
{
    return alloc_decide(sid, a0, a1, a2, 0, ra, NULL);
}

/* The same for the shape of four arguments (mi_heap_calloc_aligned). */
static ML_NOINLINE void *alloc4_slow(int sid, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t ra)
{
    return alloc_decide(sid, a0, a1, a2, a3, ra, NULL);
}

/* A string of n bytes (strlen + 1) at q, which the original (strdup, strndup, realpath) just made
 * in heap h (0: the default heap), whose countdown ran out: sampled, it is copied into the range
 * and the allocator's copy freed (one copy more, on sampled calls only); else q. */
static ML_NOINLINE char *str_slow(int sid, uintptr_t h, char *q, size_t n, uintptr_t ra)
{
    struct hk_slot *s = SID_SLOT(sid);
    int d = ml_src_decide(n);
    char *r = d == ML_SAMPLE ? sample_hooked(s, hk_rows[SID_ROW(sid)].shape, n, 0, 0, h, ra) : NULL;
    if (r) {
        memcpy(r, q, n);
        s->fam.free(q);
        return r;
    }
    if (d == ML_EXACT)
        ml_src_exact(ML_SRC_HOOKED, n, ra);
    return q;
}

static ML_NOINLINE int posix_slow(int sid, void **out, size_t al, size_t n, uintptr_t ra)
{
    void *f = SID_SLOT(sid)->orig[SID_ROW(sid)];
    if (al < sizeof(void *) || (al & (al - 1)))
        return ((int (*)(void **, size_t, size_t))f)(out, al, n);
    void *q = NULL;
    int err = 0;
    void *p = alloc_decide(sid, (uintptr_t)&q, al, n, 0, ra, &err);
    if (!p)
        return err ? err : ENOMEM;
    *out = p;
    return 0;
}

static void *call_realloc(void *f, int shape, uintptr_t h, void *p, uintptr_t a1, uintptr_t a2)
{
    if (shape == SH_REALLOC)
        return ((f_p_n)f)(p, a1);
    if (shape == SH_HREALLOC)
        return ((void *(*)(uintptr_t, void *, uintptr_t))f)(h, p, a1);
    if (hk_heap_first(shape))
        return ((void *(*)(uintptr_t, void *, uintptr_t, uintptr_t))f)(h, p, a1, a2);
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

/* A block of ours that must become the allocator's (an offset alignment the range cannot serve): q,
 * what the allocator made for it (NULL: p stays, as a failed realloc leaves it), gets p's bytes. */
static void *moved_out(void *p, void *q, size_t n)
{
    if (q) {
        size_t old = ml_src_usable(p);
        memcpy(q, p, old < n ? old : n);
        ml_src_free(p);
    }
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
 * range and the allocator's copy freed: one copy more, on sampled reallocations only. n, the
 * alignment and zeroing come from the row's shape (tail-called from the hook: see SID); h is
 * mimalloc's heap for the shapes that take one (0 for the others). A block of ours reallocated
 * through a heap is that heap's now; through a heap-less entry it keeps its heap (mimalloc keeps
 * a block it resizes in place in its heap). */
static ML_NOINLINE void *realloc_slow(int sid, uintptr_t h, void *p, uintptr_t a1, uintptr_t a2, uintptr_t ra)
{
    int id = SID_ROW(sid), shape = hk_rows[id].shape, zero = hk_rows[id].p1 & 1;
    struct hk_slot *s = SID_SLOT(sid);
    size_t n = shape == SH_REALLOCN || shape == SH_HREALLOCN ? a1 * a2 : a1, align = 0;
    if (shape == SH_REALLOC_AL || shape == SH_HREALLOC_AL)
        align = a2;
    if (shape == SH_RALLOCX)
        align = mallocx_align((int)a2), zero = ((int)a2 & 0x40) != 0;
    if (ml_src_owns(p)) {
        void *q = realloc_owned(s, p, n, align, zero, ra);
        if (hk_heap_first(shape))
            heap_mark(s, q, shape, h);
        return q;
    }
    int d = n ? ml_src_decide(n) : ML_FORWARD;
    if (d == ML_SAMPLE && !sample_begin())
        d = ML_FORWARD;
    if (d == ML_SAMPLE && !p) { /* realloc(NULL, n) allocates */
        void *q = ml_src_sample_of(&s->fam, n, align, zero, ra);
        if (q)
            return sample_end(), heap_mark(s, q, shape, h), q;
    }
    void *q = call_realloc(s->orig[id], shape, h, p, a1, a2);
    void *r = q && d == ML_SAMPLE && p ? ml_src_sample_of(&s->fam, n, align, 0, ra) : NULL;
    if (d == ML_SAMPLE)
        sample_end();
    if (r) {
        heap_mark(s, r, shape, h);
        memcpy(r, q, n);
        slot_free_sized(s, q, n, shape == SH_RALLOCX ? (int)a2 : 0);
        return r;
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
    memlens_hooks_quiet.live = ml_range_live_addr();
    static void *(*const m[HK_SLOTS])(size_t) = {slot_malloc_0, slot_malloc_1, slot_malloc_2};
    static void (*const f[HK_SLOTS])(void *) = {slot_free_0, slot_free_1, slot_free_2};
    hk_slots[s].fam.malloc = m[s];
    hk_slots[s].fam.free = f[s];
}

/* ---- the hooks, by shape ---- */

#define ORIG(S, id, T) ((T)hk_slots[S].orig[HK_##id])
#define SLOW_ALLOC(S, id, a0, a1, a2) return alloc_slow(SID(S, id), a0, a1, a2, RA())

#define FN_SH_MALLOC(S, id, p1)                                                                        \
    static FAST void *hk_##S##_##id(size_t n, uintptr_t x)                                             \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, f_n_x)(n, x);                                                                      \
    slow:                                                                                              \
        SLOW_ALLOC(S, id, n, x, 0);                                            \
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
        SLOW_ALLOC(S, id, n, sz, x);                                                                \
    }
#define FN_SH_MEMALIGN(S, id, p1)                                                                      \
    static FAST void *hk_##S##_##id(size_t al, size_t n)                                               \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, void *(*)(size_t, size_t))(al, n);                                                 \
    slow:                                                                                              \
        if (al & (al - 1)) /* not a power of two: the allocator's answer */                            \
            return ORIG(S, id, void *(*)(size_t, size_t))(al, n);                                             \
        SLOW_ALLOC(S, id, al, n, 0);                                                                   \
    }
#define FN_SH_ALIGNED(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(size_t n, size_t al, uintptr_t x)                                  \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, void *(*)(size_t, size_t, uintptr_t))(n, al, x);                                   \
    slow:                                                                                              \
        if (al & (al - 1))                                                                             \
            return ORIG(S, id, void *(*)(size_t, size_t, uintptr_t))(n, al, x);                               \
        SLOW_ALLOC(S, id, n, al, x);                                                               \
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
        SLOW_ALLOC(S, id, n, sz, al);                                                               \
    }
#define FN_SH_POSIX(S, id, p1)                                                                         \
    static FAST int hk_##S##_##id(void **out, size_t al, size_t n)                                     \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, int (*)(void **, size_t, size_t))(out, al, n);                                     \
    slow:                                                                                              \
        return posix_slow(SID(S, id), out, al, n, RA());                                               \
    }
#define FN_SH_MALLOCX(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(size_t n, int fl)                                                  \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, void *(*)(size_t, int))(n, fl);                                                    \
    slow:                                                                                              \
        SLOW_ALLOC(S, id, n, (uintptr_t)fl, 0);                                 \
    }
/* strdup, strndup and realpath (mimalloc's): the original makes the string, its size is read from
 * it (strlen + 1) and counted; a sampled one is moved into the range (str_slow). realpath into the
 * caller's buffer (p1 = 1, x given) allocates nothing. */
#define STR_BODY(S, id, p1, call, h)                                                                   \
    if (p1 && x)                                                                                       \
        return call;                                                                                   \
    char *q = call;                                                                                    \
    if (unlikely(!q))                                                                                  \
        return q;                                                                                      \
    size_t n = strlen(q) + 1;                                                                          \
    ML_COUNTDOWN_OR(n, slow);                                                                          \
    return q;                                                                                          \
slow:                                                                                                  \
    return str_slow(SID(S, id), h, q, n, RA());
#define FN_SH_STRDUP(S, id, p1)                                                                        \
    static FAST char *hk_##S##_##id(const char *a, uintptr_t x)                                        \
    {                                                                                                  \
        STR_BODY(S, id, p1, ORIG(S, id, char *(*)(const char *, uintptr_t))(a, x), 0)                  \
    }
#define REALLOC_BODY(S, id, n, a1, a2, call)                                                            \
    if (likely(!ml_src_owns(p)) && likely((ml_tls.countdown -= (int64_t)(n)) > 0))                     \
        return call;                                                                                   \
    return realloc_slow(SID(S, id), 0, p, a1, a2, RA());
#define FN_SH_REALLOC(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(void *p, size_t n)                                                 \
    {                                                                                                  \
        REALLOC_BODY(S, id, n, n, 0, ORIG(S, id, f_p_n)(p, n))                                         \
    }
#define FN_SH_REALLOCN(S, id, p1)                                                                      \
    static FAST void *hk_##S##_##id(void *p, size_t n, size_t sz)                                      \
    {                                                                                                  \
        size_t t;                                                                                      \
        if (unlikely(__builtin_mul_overflow(n, sz, &t)))                                               \
            return ORIG(S, id, void *(*)(void *, size_t, size_t))(p, n, sz);                                  \
        REALLOC_BODY(S, id, t, n, sz, ORIG(S, id, void *(*)(void *, size_t, size_t))(p, n, sz))        \
    }
#define FN_SH_REALLOC_AL(S, id, p1)                                                                    \
    static FAST void *hk_##S##_##id(void *p, size_t n, size_t al)                                      \
    {                                                                                                  \
        REALLOC_BODY(S, id, n, n, al, ORIG(S, id, void *(*)(void *, size_t, size_t))(p, n, al))       \
    }
#define FN_SH_RALLOCX(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(void *p, size_t n, int fl)                                         \
    {                                                                                                  \
        REALLOC_BODY(S, id, n, n, (uintptr_t)fl,                                                      \
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

/* mimalloc's heap shapes: the heap first, passed through (the stub's fast path counts %rdi, so
 * these count in the hook). */
#define FN_SH_HMALLOC(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(uintptr_t h, size_t n)                                           \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, void *(*)(uintptr_t, size_t))(h, n);                                        \
    slow:                                                                                              \
        SLOW_ALLOC(S, id, h, n, 0);                                                                    \
    }
#define FN_SH_HCALLOC(S, id, p1)                                                                       \
    static FAST void *hk_##S##_##id(uintptr_t h, size_t n, size_t sz)                                \
    {                                                                                                  \
        size_t t;                                                                                      \
        if (unlikely(__builtin_mul_overflow(n, sz, &t)))                                               \
            return ORIG(S, id, void *(*)(uintptr_t, size_t, size_t))(h, n, sz);                        \
        ML_COUNTDOWN_OR(t, slow);                                                                      \
        return ORIG(S, id, void *(*)(uintptr_t, size_t, size_t))(h, n, sz);                            \
    slow:                                                                                              \
        SLOW_ALLOC(S, id, h, n, sz);                                                                   \
    }
#define FN_SH_HALIGNED(S, id, p1)                                                                      \
    static FAST void *hk_##S##_##id(uintptr_t h, size_t n, size_t al)                                \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n, slow);                                                                      \
        return ORIG(S, id, void *(*)(uintptr_t, size_t, size_t))(h, n, al);                            \
    slow:                                                                                              \
        if (al & (al - 1))                                                                             \
            return ORIG(S, id, void *(*)(uintptr_t, size_t, size_t))(h, n, al);                        \
        SLOW_ALLOC(S, id, h, n, al);                                                                   \
    }
#define FN_SH_HCALLOC_AL(S, id, p1)                                                                    \
    static FAST void *hk_##S##_##id(uintptr_t h, size_t n, size_t sz, size_t al)                       \
    {                                                                                                  \
        size_t t;                                                                                      \
        if (unlikely(__builtin_mul_overflow(n, sz, &t)) || (al & (al - 1)))                            \
            return ORIG(S, id, void *(*)(uintptr_t, size_t, size_t, size_t))(h, n, sz, al);            \
        ML_COUNTDOWN_OR(t, slow);                                                                      \
        return ORIG(S, id, void *(*)(uintptr_t, size_t, size_t, size_t))(h, n, sz, al);                \
    slow:                                                                                              \
        return alloc4_slow(SID(S, id), h, n, sz, al, RA());                                            \
    }
#define FN_SH_HSTRDUP(S, id, p1)                                                                       \
    static FAST char *hk_##S##_##id(uintptr_t h, const char *a, uintptr_t x)                           \
    {                                                                                                  \
        STR_BODY(S, id, p1, ORIG(S, id, char *(*)(uintptr_t, const char *, uintptr_t))(h, a, x), h)    \
    }
#define H_REALLOC_BODY(S, id, n, a1, a2, call)                                                         \
    if (likely(!ml_src_owns(p)) && likely((ml_tls.countdown -= (int64_t)(n)) > 0))                     \
        return call;                                                                                   \
    return realloc_slow(SID(S, id), h, p, a1, a2, RA());
#define FN_SH_HREALLOC(S, id, p1)                                                                      \
    static FAST void *hk_##S##_##id(uintptr_t h, void *p, size_t n)                                  \
    {                                                                                                  \
        H_REALLOC_BODY(S, id, n, n, 0, ORIG(S, id, void *(*)(uintptr_t, void *, size_t))(h, p, n))    \
    }
#define FN_SH_HREALLOCN(S, id, p1)                                                                     \
    static FAST void *hk_##S##_##id(uintptr_t h, void *p, size_t n, size_t sz)                       \
    {                                                                                                  \
        size_t t;                                                                                      \
        if (unlikely(__builtin_mul_overflow(n, sz, &t)))                                               \
            return ORIG(S, id, void *(*)(uintptr_t, void *, size_t, size_t))(h, p, n, sz);             \
        H_REALLOC_BODY(S, id, t, n, sz, ORIG(S, id, void *(*)(uintptr_t, void *, size_t, size_t))(h, p, n, sz)) \
    }
#define FN_SH_HREALLOC_AL(S, id, p1)                                                                   \
    static FAST void *hk_##S##_##id(uintptr_t h, void *p, size_t n, size_t al)                       \
    {                                                                                                  \
        H_REALLOC_BODY(S, id, n, n, al, ORIG(S, id, void *(*)(uintptr_t, void *, size_t, size_t))(h, p, n, al)) \
    }
/* mi_heap_delete: the heap's sampled blocks go to the backing heap first. mi_heap_destroy: they
 * are freed after the original ran, unless the heap is one mimalloc only deletes (heap_destroy). */
#define FN_SH_HDESTROY(S, id, p1)                                                                      \
    static void hk_##S##_##id(void *h) { heap_destroy(&hk_slots[S], h, ORIG(S, id, void (*)(void *))); }
#define FN_SH_HDELETE(S, id, p1)                                                                       \
    static void hk_##S##_##id(void *h)                                                                 \
    {                                                                                                  \
        kept_forget(h);                                                                                \
        heap_gone(&hk_slots[S], h, 0);                                                                 \
        ORIG(S, id, void (*)(void *))(h);                                                              \
    }
/* The heaps' makers: which heaps mi_heap_destroy will only delete (heap_made). */
#define FN_SH_HNEW(S, id, p1)                                                                          \
    static void *hk_##S##_##id(int tag, _Bool allow_destroy, uintptr_t arena)                          \
    {                                                                                                  \
        void *h = ORIG(S, id, void *(*)(int, _Bool, uintptr_t))(tag, allow_destroy, arena);            \
        heap_made(h, !allow_destroy);                                                                  \
        return h;                                                                                      \
    }
/* mi_heap_new_in_arena's heaps are only deleted in the mimalloc that has mi_heap_new_ex (2.1 to 2.x;
 * 2.0.9's, Debian's, and 3.3's are destroyable and it has none): its address tells. */
#define FN_SH_HNEW_ARENA(S, id, p1)                                                                    \
    static void *hk_##S##_##id(uintptr_t arena)                                                        \
    {                                                                                                  \
        void *h = ORIG(S, id, void *(*)(uintptr_t))(arena);                                            \
        heap_made(h, hk_slots[S].orig[HK_MI_heap_new_ex] != NULL);                                     \
        return h;                                                                                      \
    }
/* The reallocating entry points only guarded: a block of ours that reaches one is moved by
 * realloc_owned (heap h: 0, or the one passed), or, for an offset alignment the range cannot serve,
 * into a block the original allocates (`fresh`: the call with p = NULL; NULL leaves p as it is). */
#define OWNED_AT(S, h, n, al, off, zero, fresh)                                                        \
    do {                                                                                               \
        if (!(off) && !((al) & ((al) - 1))) {                                                          \
            void *q_ = realloc_owned(&hk_slots[S], p, n, al, zero, RA());                              \
            if (h)                                                                                     \
                heap_mark(&hk_slots[S], q_, SH_HREALLOC, h);                                           \
            return q_;                                                                                 \
        }                                                                                              \
        return moved_out(p, fresh, n);                                                                 \
    } while (0)
#define FN_SH_GREALLOC_AT(S, id, p1)                                                                   \
    static void *hk_##S##_##id(void *p, size_t n, size_t al, size_t off)                               \
    {                                                                                                  \
        void *(*o)(void *, size_t, size_t, size_t) = ORIG(S, id, void *(*)(void *, size_t, size_t, size_t)); \
        if (likely(!ml_src_owns(p)))                                                                   \
            return o(p, n, al, off);                                                                   \
        OWNED_AT(S, 0, n, al, off, p1, o(NULL, n, al, off));                                          \
    }
#define FN_SH_GRECALLOC_AL(S, id, p1)                                                                  \
    static void *hk_##S##_##id(void *p, size_t n, size_t sz, size_t al)                                \
    {                                                                                                  \
        void *(*o)(void *, size_t, size_t, size_t) = ORIG(S, id, void *(*)(void *, size_t, size_t, size_t)); \
        size_t t;                                                                                      \
        if (likely(!ml_src_owns(p)))                                                                   \
            return o(p, n, sz, al);                                                                    \
        if (__builtin_mul_overflow(n, sz, &t))                                                         \
            return errno = ENOMEM, NULL;                                                               \
        OWNED_AT(S, 0, t, al, 0, 1, NULL);                                                             \
    }
#define FN_SH_GRECALLOC_AT(S, id, p1)                                                                  \
    static void *hk_##S##_##id(void *p, size_t n, size_t sz, size_t al, size_t off)                    \
    {                                                                                                  \
        void *(*o)(void *, size_t, size_t, size_t, size_t) =                                           \
            ORIG(S, id, void *(*)(void *, size_t, size_t, size_t, size_t));                            \
        size_t t;                                                                                      \
        if (likely(!ml_src_owns(p)))                                                                   \
            return o(p, n, sz, al, off);                                                               \
        if (__builtin_mul_overflow(n, sz, &t))                                                         \
            return errno = ENOMEM, NULL;                                                               \
        OWNED_AT(S, 0, t, al, off, 1, o(NULL, n, sz, al, off));                                        \
    }
#define FN_SH_GHREALLOC_AT(S, id, p1)                                                                  \
    static void *hk_##S##_##id(uintptr_t h, void *p, size_t n, size_t al, size_t off)                  \
    {                                                                                                  \
        void *(*o)(uintptr_t, void *, size_t, size_t, size_t) =                                        \
            ORIG(S, id, void *(*)(uintptr_t, void *, size_t, size_t, size_t));                         \
        if (likely(!ml_src_owns(p)))                                                                   \
            return o(h, p, n, al, off);                                                                \
        OWNED_AT(S, h, n, al, off, p1, o(h, NULL, n, al, off));                                        \
    }
#define FN_SH_GHRECALLOC_AL(S, id, p1)                                                                 \
    static void *hk_##S##_##id(uintptr_t h, void *p, size_t n, size_t sz, size_t al)                   \
    {                                                                                                  \
        void *(*o)(uintptr_t, void *, size_t, size_t, size_t) =                                        \
            ORIG(S, id, void *(*)(uintptr_t, void *, size_t, size_t, size_t));                         \
        size_t t;                                                                                      \
        if (likely(!ml_src_owns(p)))                                                                   \
            return o(h, p, n, sz, al);                                                                 \
        if (__builtin_mul_overflow(n, sz, &t))                                                         \
            return errno = ENOMEM, NULL;                                                               \
        OWNED_AT(S, h, t, al, 0, 1, NULL);                                                             \
    }
#define FN_SH_GHRECALLOC_AT(S, id, p1)                                                                 \
    static void *hk_##S##_##id(uintptr_t h, void *p, size_t n, size_t sz, size_t al, size_t off)       \
    {                                                                                                  \
        void *(*o)(uintptr_t, void *, size_t, size_t, size_t, size_t) =                                \
            ORIG(S, id, void *(*)(uintptr_t, void *, size_t, size_t, size_t, size_t));                 \
        size_t t;                                                                                      \
        if (likely(!ml_src_owns(p)))                                                                   \
            return o(h, p, n, sz, al, off);                                                            \
        if (__builtin_mul_overflow(n, sz, &t))                                                         \
            return errno = ENOMEM, NULL;                                                               \
        OWNED_AT(S, h, t, al, off, 1, o(h, NULL, n, sz, al, off));                                     \
    }
#define FN_SH_LOOKUP(S, id, p1)                                                                        \
    static void hk_##S##_##id(void) {}

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
#define G_SH_HREALLOC(S, id, p1)                                                                       \
    GUARD(S, id, p1, (uintptr_t h, void *p, size_t n), n, 0,                                           \
          ORIG(S, id, void *(*)(uintptr_t, void *, size_t))(h, p, n))
#define G_SH_HREALLOCN(S, id, p1)                                                                      \
    GUARD(S, id, p1, (uintptr_t h, void *p, size_t n, size_t sz), n * sz, 0,                           \
          ORIG(S, id, void *(*)(uintptr_t, void *, size_t, size_t))(h, p, n, sz))
#define G_SH_HREALLOC_AL(S, id, p1)                                                                    \
    GUARD(S, id, p1, (uintptr_t h, void *p, size_t n, size_t al), n, al,                               \
          ORIG(S, id, void *(*)(uintptr_t, void *, size_t, size_t))(h, p, n, al))
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
#define G_SH_HMALLOC G_NONE
#define G_SH_HCALLOC G_NONE
#define G_SH_HALIGNED G_NONE
#define G_SH_HDESTROY G_NONE
#define G_SH_HDELETE G_NONE
#define G_SH_LOOKUP G_NONE
#define G_SH_HNEW_ARENA G_NONE
#define G_SH_HNEW G_NONE
#define G_SH_GHRECALLOC_AT G_NONE
#define G_SH_GHRECALLOC_AL G_NONE
#define G_SH_GHREALLOC_AT G_NONE
#define G_SH_GRECALLOC_AT G_NONE
#define G_SH_GRECALLOC_AL G_NONE
#define G_SH_GREALLOC_AT G_NONE
#define G_SH_HSTRDUP G_NONE
#define G_SH_HCALLOC_AL G_NONE
#define G_SH_STRDUP G_NONE

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
#define P_SH_HREALLOC P_SH_REALLOC
#define P_SH_HREALLOCN P_SH_REALLOC
#define P_SH_HREALLOC_AL P_SH_REALLOC
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
#define P_SH_HMALLOC P_NONE
#define P_SH_HCALLOC P_NONE
#define P_SH_HALIGNED P_NONE
#define P_SH_HDESTROY P_NONE
#define P_SH_HDELETE P_NONE
#define P_SH_LOOKUP P_NONE
#define P_SH_HNEW_ARENA P_NONE
#define P_SH_HNEW P_NONE
#define P_SH_GHRECALLOC_AT P_NONE
#define P_SH_GHRECALLOC_AL P_NONE
#define P_SH_GHREALLOC_AT P_NONE
#define P_SH_GRECALLOC_AT P_NONE
#define P_SH_GRECALLOC_AL P_NONE
#define P_SH_GREALLOC_AT P_NONE
#define P_SH_HSTRDUP P_NONE
#define P_SH_HCALLOC_AL P_NONE
#define P_SH_STRDUP P_NONE
#define HK_GPTR(S, id, tab, name, shape, p1) P_##shape(S, id),
static void *const guards[HK_SLOTS][HK_NROWS] = {{HK_ROWS(HK_GPTR, 0)}, {HK_ROWS(HK_GPTR, 1)}, {HK_ROWS(HK_GPTR, 2)}};
#undef HK_GPTR

void *hk_hook(int s, int id) { return hooks[s][id]; }
void *hk_guard(int s, int id) { return guards[s][id]; }
