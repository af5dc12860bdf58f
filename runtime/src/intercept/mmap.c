/* Anonymous memory malloc does not see (issue 31): mmap, mremap and munmap interposed (they are
 * reached through the PLT like malloc), sampled by the same byte countdown and recorded as the
 * seam's ML_SRC_MMAP kind (its stacks carry ML_STACK_MMAP, the profile labels them kind=mmap).
 *
 * What counts: MAP_ANONYMOUS mappings that are not PROT_NONE (a reservation holds no memory), made
 * by the program. Not counted: the runtime's own (its thread is busy, or the call comes from our
 * module); glibc's malloc's large blocks, which glibc maps through its internal __mmap, not the PLT
 * (they are malloc's, already counted); and the arenas of an allocator the program brings
 * (jemalloc, tcmalloc, mimalloc), whose blocks memlens counts through malloc or their entry hooks:
 * a fired sample whose stack runs through such an allocator is dropped (mmapwho.c).
 *
 * A sampled mapping is kept by range in a table of its own (munmap may cut any part of it, which
 * the seam's by-address model cannot see): a munmap removes what it covers whole and trims what it
 * covers partly, whose pieces keep their share of its weights; mremap moves, shrinks or grows it,
 * its weights scaled with its length. munmap and mremap scan the table only while a sampled
 * mapping is live. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../store/state.h"
#include "../unwind/unwind.h"
#include "../record/block.h"
#include "mmapwho.h"
#include "source.h"

#define RA() ((uintptr_t)__builtin_return_address(0))
#define MAPS_MAX 65536

struct map { uintptr_t lo, hi; void *shadow; };
static struct map *maps;
static uint32_t nmaps;
static _Atomic uint32_t live;
static _Atomic int lock;

static int ours(int flags, int prot, uintptr_t ra)
{
    return ml_cfg.mmap && (flags & MAP_ANONYMOUS) && prot != PROT_NONE && !ml_tls.busy && !ml_tls.in_init && ml_cfg.ready &&
           !ml_unwind_is_self(ra);
}

/* The table is mapped on the first sample. */
static int maps_ready(void)
{
    if (!maps)
        maps = ml_mmap_table((size_t)MAPS_MAX * sizeof *maps);
    return maps != NULL;
}

/* A shadow's birth and free change the heap estimate as anonymous mappings (ml_tls.mmap_acct): the
 * timeline shows them apart from the heap (peak.c). */
static void *shadow_new(size_t len, uintptr_t ra)
{
    ml_tls.mmap_acct = 1;
    void *s = ml_src_observe_sample(ML_SRC_MMAP, len, ra);
    ml_tls.mmap_acct = 0;
    return s;
}

static void shadow_free(void *s)
{
    ml_tls.mmap_acct = 1;
    ml_src_free(s);
    ml_tls.mmap_acct = 0;
}

static ML_NOINLINE void observe(void *p, size_t len, uintptr_t ra)
{
    /* An allocator's arena: its bytes are counted as its blocks. The countdown crossing is used up
     * (re-armed) and the sample thrown away. Byte sampling is a Poisson process over all bytes
     * mapped, each byte picked independently of whose it is, so dropping every sample of one
     * category leaves the estimate of the others unbiased (as if that category were never seen). */
    if (ml_mmap_by_allocator(ra)) {
        ml_src_decide(len);
        return;
    }
    void *shadow = shadow_new(len, ra);
    if (!shadow)
        return;
    ml_spin_lock(&lock);
    int kept = maps_ready() && nmaps < MAPS_MAX;
    if (kept) {
        maps[nmaps++] = (struct map){(uintptr_t)p, (uintptr_t)p + ((len + 4095) & ~(size_t)4095), shadow};
        atomic_store_explicit(&live, nmaps, memory_order_relaxed);
    }
    ml_spin_unlock(&lock);
    if (!kept) { /* counts as allocated, not live (as `untracked`) */
        atomic_fetch_add_explicit(&ml_st->untracked, 1, memory_order_relaxed);
        shadow_free(shadow);
    }
}

/* ---- what is left of a sampled mapping ----
 *
 * A munmap that cuts a sampled mapping, or an mremap that moves, shrinks or grows it, leaves pieces
 * whose live bytes are their own length. The mapping of L bytes was sampled with probability p(L)
 * and weighs L/p(L); a piece of L' bytes weighs L'/p(L) (the weights scaled by L'/L), which is
 * still unbiased: its expectation over the sampling is L'. The pieces get shadows of their own
 * with those weights (the live counts only: what was allocated stays as it was); a piece keeps its
 * stack and call site, and its age starts again. Shadows are made and freed outside the table's
 * lock, as the range's lock may be held by a thread that calls munmap: the table loses the entry
 * meanwhile, so a munmap of the same range racing on another thread may miss it. */

struct cut {
    void *shadow;      /* of the mapping as it was */
    uintptr_t len;     /* its length */
    uintptr_t lo[2], hi[2];
    int n;             /* pieces left: 0, 1 or 2 (a hole in the middle) */
};
#define CUTS 64

static uint64_t scaled(uint64_t w, uintptr_t part, uintptr_t whole)
{
    return (uint64_t)((unsigned __int128)w * part / whole);
}

/* A shadow for a piece of `len` bytes of the mapping of `whole` bytes whose shadow is `old`. */
static void *piece_shadow(void *old, uintptr_t len, uintptr_t whole)
{
    if (len == whole)
        return old;
    const struct ml_block *b = ml_block_of(old);
    uint64_t fx = scaled(b->w_fx, len, whole), by = scaled(b->w_bytes, len, whole);
    if (!by)
        return NULL;
    ml_tls.busy++; /* what the range maps for it is the runtime's own */
    ml_tls.mmap_acct = 1;
    void *s = ml_block_new(1, 1, len, 0, 0, b->stack, fx ? fx : 1, by, b->ra, 0);
    ml_tls.mmap_acct = 0;
    ml_tls.busy--;
    return s;
}

/* Outside the lock: the pieces' shadows, into the table; the old shadows freed. */
static void apply(struct cut *c, int n)
{
    for (int i = 0; i < n; i++) {
        void *sh[2] = {NULL, NULL};
        int reused = 0;
        for (int k = 0; k < c[i].n; k++) {
            sh[k] = piece_shadow(c[i].shadow, c[i].hi[k] - c[i].lo[k], c[i].len);
            reused |= sh[k] == c[i].shadow;
        }
        ml_spin_lock(&lock);
        for (int k = 0; k < c[i].n; k++)
            if (sh[k] && maps_ready() && nmaps < MAPS_MAX) {
                maps[nmaps++] = (struct map){c[i].lo[k], c[i].hi[k], sh[k]};
                sh[k] = NULL;
            }
        atomic_store_explicit(&live, nmaps, memory_order_relaxed);
        ml_spin_unlock(&lock);
        for (int k = 0; k < c[i].n; k++)
            if (sh[k]) /* no room in the table: it stops being live */
                shadow_free(sh[k]);
        if (!reused)
            shadow_free(c[i].shadow);
    }
}

/* Lock held: take the entry at i out of the table into a cut, with no pieces yet. */
static void take(uint32_t i, struct cut *c)
{
    *c = (struct cut){maps[i].shadow, maps[i].hi - maps[i].lo, {0}, {0}, 0};
    maps[i] = maps[--nmaps];
}

static void keep_piece(struct cut *c, uintptr_t lo, uintptr_t hi)
{
    if (hi > lo) {
        c->lo[c->n] = lo;
        c->hi[c->n++] = hi;
    }
}

/* [lo, hi) is unmapped: the sampled mappings it touches keep what is outside it. */
static ML_NOINLINE void unmapped(uintptr_t lo, uintptr_t hi)
{
    struct cut cuts[CUTS];
    int n = 0;
    ml_spin_lock(&lock);
    for (uint32_t i = 0; i < nmaps && n < CUTS;) {
        struct map m = maps[i];
        if (m.hi <= lo || m.lo >= hi) {
            i++;
            continue;
        }
        take(i, &cuts[n]);
        keep_piece(&cuts[n], m.lo, lo < m.hi ? lo : m.hi);
        keep_piece(&cuts[n], hi > m.lo ? hi : m.lo, m.hi);
        n++;
    }
    atomic_store_explicit(&live, nmaps, memory_order_relaxed);
    ml_spin_unlock(&lock);
    apply(cuts, n);
    if (n == CUTS) /* the rest in another pass */
        unmapped(lo, hi);
}

/* The mapping [old, old + old_len) is now [q, q + len): its sampled pieces move with it, what
 * falls past the new end is gone, and the piece that reached the old end grows with it. */
static ML_NOINLINE void remapped(uintptr_t old, uintptr_t old_len, uintptr_t q, uintptr_t len)
{
    struct cut cuts[CUTS];
    int n = 0;
    uintptr_t end = old + old_len;
    ml_spin_lock(&lock);
    for (uint32_t i = 0; i < nmaps && n < CUTS;) {
        struct map m = maps[i];
        if (m.hi <= old || m.lo >= end) {
            i++;
            continue;
        }
        take(i, &cuts[n]);
        uintptr_t a = q + ((m.lo > old ? m.lo : old) - old), b = q + ((m.hi < end ? m.hi : end) - old);
        if (m.hi >= end && len > old_len)
            b = q + len;
        keep_piece(&cuts[n], a, b < q + len ? b : q + len);
        n++;
    }
    atomic_store_explicit(&live, nmaps, memory_order_relaxed);
    ml_spin_unlock(&lock);
    apply(cuts, n);
}

static inline int any_live(void) { return atomic_load_explicit(&live, memory_order_relaxed) != 0; }

ML_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    void *p = (void *)r;
    if (r == -1)
        return MAP_FAILED;
    if ((flags & MAP_FIXED) && any_live())
        unmapped((uintptr_t)p, (uintptr_t)p + len); /* replaced what was there */
    if (!ours(flags, prot, RA()))
        return p;
    ML_COUNTDOWN_OR(len, slow);
    return p;
slow:
    observe(p, len, RA());
    return p;
}

ML_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

ML_EXPORT int munmap(void *addr, size_t len)
{
    long r = syscall(SYS_munmap, addr, len);
    if (r == 0 && any_live())
        unmapped((uintptr_t)addr, (uintptr_t)addr + ((len + 4095) & ~(size_t)4095));
    return (int)r;
}

ML_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    void *want = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    long r = syscall(SYS_mremap, old, old_len, new_len, flags, want);
    if (r == -1)
        return MAP_FAILED;
    if (any_live() && old_len)
        remapped((uintptr_t)old, (old_len + 4095) & ~(size_t)4095, (uintptr_t)r, (new_len + 4095) & ~(size_t)4095);
    return (void *)r;
}
