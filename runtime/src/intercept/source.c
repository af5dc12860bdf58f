/* The allocation-source seam (source.h explains the two models): the one sampled path every source
 * of allocations reaches, and model (a)'s slow paths written once for any allocator family.
 *
 * The slow paths run when a thread's countdown ran out (or a realloc met a block of ours); what they
 * forward goes to their family `f`, and what they sample comes from the private range, whichever
 * family it was asked of. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>

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

/* The stack of a sample or an exact record: an mmap source's stacks are their own (ML_STACK_MMAP),
 * so the profile can show them as a kind of their own beside the heap. */
static uint32_t intern(enum ml_src_kind kind, uintptr_t ra)
{
    ml_tls.stack_flags = kind == ML_SRC_MMAP ? ML_STACK_MMAP : 0;
    uint32_t id = ml_unwind_intern(ra, 1);
    ml_tls.stack_flags = 0;
    return id;
}

/* A sample of `size` bytes (its weights), recorded in a block of `real` bytes from the range: the
 * block itself (model a, real = size), or a shadow that carries the accounting of memory someone
 * else owns (model b, real = 1). ML_SAMPLE and ML_EXACT both come here for the malloc family:
 * exact mode serves every block from the range too, so that its frees are seen and the live heap,
 * peak, lifetimes and timeline are exact as well (a block costs the range's header, 176 bytes, and
 * the range lock). */
static void *sample(enum ml_src_kind kind, size_t size, size_t real, size_t room, size_t align, int zero,
                    uintptr_t ra)
{
    struct ml_thread *t = &ml_tls;
    /* Exact mode records every allocation: one in ML_COST_EXACT_EVERY is timed (cost.c) */
    uint64_t R = armed_R(t), times = R ? 1 : ML_COST_EXACT_EVERY;
    int timed = R || t->samples % ML_COST_EXACT_EVERY == 0;
    uint64_t tsc = timed ? __rdtsc() : 0, c0 = ml_cost_begin_at(tsc); /* also the block's birth */
    ml_state_own(); /* a fork child's first write to its table copies its parent's (state.c) */
    t->busy++;
    weights(t, size, R);
    uint64_t w_fx = t->w_fx, w_bytes = t->w_bytes;
    uint32_t id = intern(kind, ra);
    void *p = ml_block_new(real, room, size, align, zero, id, w_fx, w_bytes, ra, tsc);
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

void *ml_src_sample(enum ml_src_kind kind, size_t size, size_t align, int zero, uintptr_t ra)
{
    return sample(kind, size, size, size, align, zero, ra);
}

/* Blocks above this are sized in pages (an allocator maps them, or cuts them from its heap at page
 * size or finer): no probe, whose malloc and free of a block above glibc's mmap threshold (128 KiB)
 * would cost the program two system calls per sample. */
#define ROOM_PROBE_MAX (64u << 10)

/* The room of a block of n bytes whose allocator gives a chunk of usable size u for it: u, unless
 * that is twice n or more (a chunk the allocator had at hand, not n's class). */
static inline size_t room_rule(size_t u, size_t n) { return u > n && u - n < n ? u : n; }

/* The usable size family f gives a block of n bytes (block.h, ml_block_usable: why), found by asking
 * it: one malloc, malloc_usable_size and free of the real allocator, on sampled events of a size
 * other than the thread's last (cached: programs allocate few distinct sizes) only. Exact
 * mode serves every block from the range, so no block there sees another's slack: no probe. */
static size_t room_of(const struct ml_family *f, size_t n)
{
    if (armed_R(&ml_tls) == 0 || !f || !f->malloc || !f->free || !f->malloc_usable_size)
        return n;
    if (n > ROOM_PROBE_MAX)
        return (n + 4095) & ~(size_t)4095;
    struct ml_thread *th = &ml_tls;
    if (th->room_fam == f && th->room_size == n)
        return th->room;
    void *t = f->malloc(n);
    if (!t)
        return n;
    size_t u = f->malloc_usable_size(t);
    f->free(t);
    th->room_fam = f;
    th->room_size = n;
    th->room = room_rule(u, n);
    return th->room;
}

void *ml_src_sample_of(const struct ml_family *f, size_t size, size_t align, int zero, uintptr_t ra)
{
    return sample(f->kind, size, size, room_of(f, size), align, zero, ra);
}

/* ---- placeholders: the real allocator sees the calls it would see without memlens ----
 *
 * A sampled block is served from the private range, so glibc's allocator behind the interposed
 * malloc never sees it: its heap takes another shape than without memlens (the free chunks beside
 * where the block would be are merged or split otherwise), and a program's speed can hang on that
 * shape. Measured: perl building three hashes then exiting spent 68-80 ms in one glibc
 * malloc_consolidate at exit in 7 of 10 runs at 512K, 0 of 6 bare (docs/benchmarks.md). So each
 * sampled block of the interposed family owns a placeholder: the same call (malloc, aligned,
 * realloc) made of glibc when the block is allocated or reallocated, its free when the block is
 * freed (block.c); its usable size is the block's, without a probe (room_of). We never touch its
 * bytes, but glibc may hand out memory that held data, and a reallocation copies into it: those
 * pages are the sampled block's a second time (python3 at 512K: +1 MiB of RSS; docs/benchmarks.md).
 * Giving them back (madvise) cost perl more CPU than the layout saved, refaulted at reuse.
 * Only for glibc (next_is_glibc), not for the hooked families (their heaps have calls of their own
 * that a placeholder cannot follow: mi_heap_destroy), not in exact mode (every block is in the
 * range: a placeholder would double the heap), nor above glibc's largest mmap threshold (32 MiB),
 * above which it maps every block apart from its heap. Between 128 KiB (its first threshold) and
 * 32 MiB glibc maps a block or cuts it from its heap depending on the largest mapped block freed so
 * far, so those placeholders count too: with them perl's exit consolidated in 0 of 12 runs, with
 * placeholders up to 128 KiB only in 3 of 12. A mapped placeholder costs address space (and a
 * page for glibc's header), so where that is scarce (ml_range_scarce: `ulimit -v`, or strict
 * overcommit, which charges untouched mappings) only blocks up to 128 KiB have one, and the runtime
 * keeps to its documented reserve (docs/survival.md). */
#define PH_MAX ((size_t)32 << 20)
#define PH_MAX_SCARCE ((size_t)128 << 10)

static void ph_release(void *ph) { ml_next.free(ph); }

/* Is the interposed malloc's next glibc's own? Only its heap merges and splits free chunks by their
 * neighbours, which a missing block changes. Allocators of size classes (jemalloc, tcmalloc,
 * mimalloc, preloaded after us) keep no such shape, and a placeholder there only doubled the pages
 * of a sampled block (redis with Debian's jemalloc: +2.2 MiB of RSS at 512K). Asked once, at the
 * first sample, of _dl_find_object, which takes no lock: a malloc may come from inside a
 * dl_iterate_phdr callback (under the loader's write lock), where dladdr would wait for the
 * loader's lock that a concurrent dlopen holds while it waits for the write lock. */
static int next_is_glibc(void)
{
    static int known = -1;
    if (known < 0) {
        struct dl_find_object fo;
        const struct link_map *lm = _dl_find_object((void *)ml_next.malloc, &fo) == 0 ? fo.dlfo_link_map : NULL;
        const char *b = lm && lm->l_name ? strrchr(lm->l_name, '/') : NULL;
        known = b && strncmp(b + 1, "libc.so", 7) == 0;
    }
    return known;
}

static inline int placed(const struct ml_family *f, size_t size)
{
    return f == &ml_next && armed_R(&ml_tls) != 0 && size <= (ml_range_scarce() ? PH_MAX_SCARCE : PH_MAX) &&
           next_is_glibc();
}

/* block.c gives placeholders back through ph_release (a race of two first samples stores it twice). */
static void ph_first(void)
{
    if (!ml_blocks_placed())
        ml_block_placeholders(ph_release);
}

/* The placeholder of a block of `size` bytes asked for by `how` (AL_* or -1: malloc). Inside the
 * runtime (busy): a signal handler's free of a sampled block waits meanwhile (block.c). */
static void *ph_alloc(const struct ml_family *f, int how, size_t align, size_t size)
{
    ph_first();
    int err = 0;
    ml_busy_enter();
    void *ph = how < 0 ? f->malloc(size) : ml_src_forward_aligned((struct ml_family *)f, how, align, size, &err);
    ml_busy_leave();
    return err ? NULL : ph;
}

/* The usable size a block of n bytes has in its placeholder ph. */
static size_t ph_room(const struct ml_family *f, void *ph, size_t n) { return room_rule(f->malloc_usable_size(ph), n); }

/* A sampled block of family f with its placeholder (if f has them): what ml_src_sample_of does. */
static void *sample_placed(const struct ml_family *f, int how, size_t size, size_t align, int zero, uintptr_t ra)
{
    if (!placed(f, size))
        return ml_src_sample_of(f, size, align, zero, ra);
    void *ph = ph_alloc(f, how, align, size);
    if (!ph) /* the allocator has no memory for it: nor would it have had for the program */
        return NULL;
    void *p = sample(f->kind, size, size, ph_room(f, ph, size), align, zero, ra);
    if (p)
        ml_block_set_placeholder(p, ph);
    else
        ph_release(ph);
    return p;
}

void ml_src_exact(enum ml_src_kind kind, size_t size, uintptr_t ra)
{
    struct ml_thread *t = &ml_tls;
    int timed = t->samples % ML_COST_EXACT_EVERY == 0; /* cost.c: one record in 64 */
    uint64_t c0 = timed ? ml_cost_begin() : 0;
    ml_state_own();
    t->busy++;
    weights(t, size, 0);
    count_alloc(intern(kind, ra), t->w_fx, t->w_bytes);
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
        void *p = sample_placed(f, -1, size, 0, 0, ra);
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
        void *p = sample_placed(f, -1, total, 0, 1, ra);
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

/* A placeholder reallocated (its contents are nobody's), inside the runtime like ph_alloc. */
static void *ph_realloc(void *ph, size_t n)
{
    ml_busy_enter();
    void *q = ml_next.realloc(ph, n);
    ml_busy_leave();
    return q;
}

/* A block of family f, p, sampled at its reallocation to n bytes: the allocator reallocates it as it
 * would have, and that chunk becomes the placeholder of the sampled copy (or stays the program's
 * block if the range is full). */
static void *realloc_placed(struct ml_family *f, void *p, size_t n, uintptr_t ra)
{
    ph_first();
    size_t old = f->malloc_usable_size(p);
    void *ph = ph_realloc(p, n);
    if (!ph)
        return NULL; /* as without memlens: p stays */
    void *q = sample(f->kind, n, n, ph_room(f, ph, n), 0, 0, ra);
    if (!q)
        return ph;
    memcpy(q, ph, old < n ? old : n);
    ml_block_set_placeholder(q, ph);
    return q;
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
            memcpy(q, p, ml_block_usable(b) < n ? ml_block_usable(b) : n);
        return q;
    }
    uint64_t c0 = ml_cost_begin(); /* the runtime's own account (cost.c) */
    /* its placeholder follows (not from a signal handler that interrupted us: ph_alloc's note) */
    void *ph = ml_block_placeholder(p), *nph = ph && !ml_tls.busy ? ph_realloc(ph, n) : NULL;
    size_t room;
    if (nph) {
        ml_block_set_placeholder(p, nph);
        room = ph_room(&ml_next, nph, n);
    } else {
        /* within its class still (and not shrunk below half of it: an allocator keeps the chunk),
         * the room stays: a buffer grown in small steps asks the allocator once per class */
        size_t have = ml_block_usable(b);
        room = n <= have && n > have / 2 ? have : room_of(f, n);
    }
    void *q = ml_block_realloc(p, n, room, ra, f->malloc);
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
    if ((d == ML_SAMPLE || d == ML_EXACT) && placed(f, n))
        return realloc_placed(f, p, n, ra);
    if (d == ML_SAMPLE || d == ML_EXACT) {
        void *q = ml_src_sample_of(f, n, 0, 0, ra);
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
        void *p = sample_placed(f, how, size, a, 0, ra);
        if (p)
            return p;
    }
    return ml_src_forward_aligned(f, how, align, size, err);
}

/* ---- model (b): observe memory someone else owns ---- */

/* The sampled blocks of observed memory, by address: open addressing over a reserved table, its
 * stripes locked apart. Consulted only by the observing sources' frees (never by free()). */
#define OBS_SLOTS (1u << 20)
#define OBS_STRIPES 64
struct obs_slot { uintptr_t key; void *shadow; };
static struct obs_slot *obs;
static _Atomic int obs_locks[OBS_STRIPES];
static _Atomic uint64_t obs_live;
static _Atomic int obs_state; /* 0 not mapped, 1 mapping, 2 mapped, 3 failed */

static int obs_map(void)
{
    int st = atomic_load_explicit(&obs_state, memory_order_acquire), z = 0;
    if (st >= 2)
        return st == 2;
    if (!atomic_compare_exchange_strong(&obs_state, &z, 1)) {
        while ((st = atomic_load(&obs_state)) == 1)
            __builtin_ia32_pause();
        return st == 2;
    }
    void *p = mmap(NULL, OBS_SLOTS * sizeof *obs, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    obs = p == MAP_FAILED ? NULL : p;
    atomic_store_explicit(&obs_state, obs ? 2 : 3, memory_order_release);
    return obs != NULL;
}

static inline uint32_t obs_hash(uintptr_t k) { return (uint32_t)((k >> 4) * 0x9E3779B97F4A7C15ull >> 44); }

/* Probe within one stripe's run of slots (the stripe is locked): the run is the slots whose hash
 * falls in the stripe, so a key never leaves its stripe. */
static struct obs_slot *obs_find(uintptr_t k, int insert)
{
    uint32_t per = OBS_SLOTS / OBS_STRIPES, h = obs_hash(k), lo = h / per * per;
    for (uint32_t i = 0; i < per; i++) {
        struct obs_slot *s = &obs[lo + (h - lo + i) % per];
        if (s->key == k || (insert && s->key == 0))
            return s;
        if (!insert && s->key == 0)
            return NULL;
    }
    return NULL;
}

/* Deletion without tombstones: the run after the freed slot is re-placed (linear probing). */
static void obs_delete(struct obs_slot *s)
{
    uint32_t per = OBS_SLOTS / OBS_STRIPES, at = (uint32_t)(s - obs), lo = at / per * per;
    s->key = 0;
    for (uint32_t i = 1; i < per; i++) {
        struct obs_slot *n = &obs[lo + (at - lo + i) % per];
        if (n->key == 0)
            return;
        struct obs_slot moved = *n;
        n->key = 0;
        *obs_find(moved.key, 1) = moved;
    }
}

void *ml_src_observe_sample(enum ml_src_kind kind, size_t size, uintptr_t ra)
{
    int d = ml_src_decide(size ? size : 1);
    if (d == ML_EXACT)
        ml_src_exact(kind, size, ra);
    if (d != ML_SAMPLE)
        return NULL;
    return sample(kind, size ? size : 1, 1, 1, 0, 0, ra);
}

static ML_NOINLINE void observe_slow(enum ml_src_kind kind, void *p, size_t size, uintptr_t ra)
{
    if (!obs_map())
        return;
    void *shadow = ml_src_observe_sample(kind, size, ra);
    if (!shadow)
        return;
    uintptr_t k = (uintptr_t)p;
    _Atomic int *l = &obs_locks[obs_hash(k) / (OBS_SLOTS / OBS_STRIPES)];
    ml_spin_lock(l);
    struct obs_slot *s = obs_find(k, 1);
    void *old = s && s->key == k ? s->shadow : NULL;
    if (s) {
        if (!old)
            atomic_fetch_add(&obs_live, 1);
        s->key = k;
        s->shadow = shadow;
    }
    ml_spin_unlock(l);
    if (old) /* reported twice without a free: the first is gone */
        ml_src_free(old);
    if (!s) { /* this stripe is full: the sample counts as allocated, not live (as `untracked`) */
        atomic_fetch_add_explicit(&ml_st->untracked, 1, memory_order_relaxed);
        ml_src_free(shadow);
    }
}

void ml_src_observe_alloc(enum ml_src_kind kind, void *p, size_t size, uintptr_t ra)
{
    if (unlikely(!p))
        return;
    ML_COUNTDOWN_OR(size, slow);
    return;
slow:
    observe_slow(kind, p, size, ra);
}

void ml_src_observe_free(enum ml_src_kind kind, void *p)
{
    (void)kind;
    if (likely(atomic_load_explicit(&obs_live, memory_order_relaxed) == 0) || !p)
        return;
    uintptr_t k = (uintptr_t)p;
    _Atomic int *l = &obs_locks[obs_hash(k) / (OBS_SLOTS / OBS_STRIPES)];
    ml_spin_lock(l);
    struct obs_slot *s = obs_find(k, 0);
    void *shadow = s ? s->shadow : NULL;
    if (s) {
        obs_delete(s);
        atomic_fetch_sub(&obs_live, 1);
    }
    ml_spin_unlock(l);
    if (shadow)
        ml_src_free(shadow);
}
