/* The "dwarf" unwinder: DWARF CFI rules (cfi.c) walked here, plus a per-thread stack cache.
 *
 * A walk is a pure function of where it starts (the return address into malloc's caller, the stack
 * pointer and rbp at the call) and of the stack words it reads (each frame's return address and,
 * where the rule says so, its saved rbp). So the cache keeps, per start, the words read and the
 * stack id they led to; when the same start comes again and every word still holds its value, the
 * walk would read the same words and find the same frames, and the id is reused without walking or
 * hashing. A loop allocating from one place pays a few loads per sample instead of a walk.
 *
 * Stacks this unwinder cannot follow (a frame without CFI or with CFI it does not interpret, a
 * signal frame) are left to the caller's fallback (libgcc's _Unwind_Backtrace). */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "../store/stacks.h"
#include "bounds.h"
#include "cfi.h"
#include "dwarf.h"

#define WAYS 4
#define MAX_READS 48 /* stacks that need more are walked every time */
#define MAX_SPAN (1ul << 30)

struct entry {
    uintptr_t ra, sp0, rbp0;
    uint64_t gen;
    uint32_t stack;
    uint16_t nreads, trunc;
    uint32_t off[MAX_READS]; /* address read - sp0 */
    uintptr_t val[MAX_READS];
};

/* The cache is mapped on a thread's first walk rather than kept in TLS: 2.4 KiB of initial-exec TLS
 * would not fit the static TLS surplus glibc keeps for libraries loaded by dlopen, which is how
 * `memlens attach` loads the runtime. A thread-exit destructor unmaps it. */
#define CACHE_BYTES ((sizeof(struct entry) * WAYS + 4095) & ~(size_t)4095)
static __thread struct entry *cache;
static pthread_key_t cache_key;
static _Atomic int cache_key_state; /* 0 none, 1 being created, 2 ready, 3 failed */
static _Atomic uint64_t code_gen = 1;

struct reads {
    int foreign; /* walking a stack that is not the thread's own: check every page first */
    int n; /* -1: too many to cache */
    uint32_t off[MAX_READS];
    uintptr_t val[MAX_READS];
};

void ml_dwarf_code_unloaded(void)
{
    atomic_fetch_add_explicit(&code_gen, 1, memory_order_acq_rel);
    ml_cfi_forget();
}

/* A word of the stack; on a foreign stack (rd->foreign) only after the kernel said it is readable. */
static inline int load(uintptr_t addr, uintptr_t sp0, struct reads *rd, uintptr_t *out)
{
    if (unlikely(rd->foreign) && !ml_readable(addr))
        return 0;
    uintptr_t v = *(const uintptr_t *)addr;
    *out = v;
    if (rd->n >= 0 && rd->n < MAX_READS) {
        rd->off[rd->n] = (uint32_t)(addr - sp0);
        rd->val[rd->n++] = v;
    } else {
        rd->n = -1;
    }
    return 1;
}

/* Walk from malloc's caller; -1 if some frame cannot be followed. */
static int walk(uintptr_t ra, uintptr_t sp0, uintptr_t rbp0, uintptr_t hi, uintptr_t *pcs, int max,
                int *trunc, struct reads *rd)
{
    uintptr_t pc = ra, sp = sp0 + 8, bp = rbp0;
    int n = 0;
    pcs[n++] = pc;
    for (;;) {
        uint64_t r = ml_cfi_rule(pc);
        if (r & ML_RULE_UNSUPPORTED)
            return rd->foreign ? (*trunc = 1, n) : -1; /* foreign: no fallback, keep what we have */
        if (r & ML_RULE_OUTERMOST)
            break;
        uintptr_t cfa = ((r & ML_RULE_CFA_RBP) ? bp : sp) + (uintptr_t)ml_rule_cfa_off(r);
        if (cfa < sp + 8 || cfa > hi)
            return -1; /* a frame that does not grow towards the stack top: not a stack we follow */
        uintptr_t next;
        if (!load(cfa - 8, sp0, rd, &next))
            goto unreadable;
        if (r & ML_RULE_RBP_SAVED) {
            uintptr_t at = cfa + (uintptr_t)ml_rule_rbp_off(r);
            if (at < sp || at + 8 > cfa)
                return -1;
            if (!load(at, sp0, rd, &bp))
                goto unreadable;
        }
        sp = cfa;
        pc = next;
        if (pc == 0)
            break; /* the outermost frame left a zero return address */
        if (n == max) {
            *trunc = 1;
            break;
        }
        pcs[n++] = pc;
    }
    return n;
unreadable: /* a foreign stack ended (or its frames are garbage): keep what was found */
    *trunc = 1;
    return n;
}

int ml_dwarf_continue(uintptr_t ra, uintptr_t sp0, uintptr_t rbp0, uintptr_t hi, int foreign,
                      uintptr_t *pcs, int max, int *trunc)
{
    if (!ml_cfi_ready())
        return -1;
    struct reads rd;
    rd.n = -1; /* nothing to cache */
    rd.foreign = foreign;
    return walk(ra, sp0, rbp0, hi, pcs, max, trunc, &rd);
}

static void cache_release(void *p)
{
    cache = NULL; /* a later destructor may still allocate: it maps a fresh cache */
    munmap(p, CACHE_BYTES);
}

static ML_NOINLINE struct entry *cache_map(void)
{
    int st = 0;
    if (atomic_compare_exchange_strong(&cache_key_state, &st, 1))
        atomic_store(&cache_key_state, pthread_key_create(&cache_key, cache_release) ? 3 : 2);
    while ((st = atomic_load(&cache_key_state)) == 1)
        __builtin_ia32_pause();
    if (st != 2)
        return NULL;
    void *p = mmap(NULL, CACHE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (pthread_setspecific(cache_key, p) != 0) {
        munmap(p, CACHE_BYTES);
        return NULL;
    }
    return cache = p;
}

static struct entry *way(uintptr_t ra, uintptr_t sp0)
{
    if (unlikely(!cache) && !cache_map())
        return NULL;
    return &cache[((ra ^ (sp0 >> 4)) * 0x9E3779B97F4A7C15ull) >> (64 - 2)];
}

static int still_valid(const struct entry *e, uintptr_t sp0)
{
    uintptr_t diff = 0; /* no branch per word: the loads all issue at once */
    for (int i = 0; i < e->nreads; i++)
        diff |= *(const uintptr_t *)(sp0 + e->off[i]) ^ e->val[i];
    return diff == 0;
}

/* Where malloc's caller stood: our own frames all keep frame pointers, so follow them up to the
 * one whose return address is `ra`; its slot is the caller's stack pointer at the call, and the rbp
 * it saved is the caller's rbp. */
static int find_start(uintptr_t ra, uintptr_t hi, uintptr_t *sp0, uintptr_t *rbp0)
{
    uintptr_t *fp = __builtin_frame_address(0);
    for (int i = 0; i < 8; i++) {
        uintptr_t f = (uintptr_t)fp;
        if (f & 7 || f + 16 > hi)
            return 0;
        if (fp[1] == ra) {
            *sp0 = f + 8;
            *rbp0 = fp[0];
            return 1;
        }
        if (fp[0] <= f)
            return 0;
        fp = (uintptr_t *)fp[0];
    }
    return 0;
}

int ml_dwarf_stack(uintptr_t ra, int max, uint32_t *id, int *trunc)
{
    uintptr_t hi = ml_stack_top(), here = (uintptr_t)__builtin_frame_address(0), sp0, rbp0;
    /* A coroutine's, fiber's or sigaltstack's frames are not bounded by the thread's stack: walk
     * them with every page checked, never cached (their memory may be freed and reused), and never
     * hand them to the fallback unwinder (which would read them unchecked). */
    int foreign = !ml_on_own_stack(here, hi);
    if (foreign)
        hi = here + MAX_SPAN < here ? UINTPTR_MAX : here + MAX_SPAN;
    if (!ra || !find_start(ra, hi, &sp0, &rbp0))
        return 0;
    uint64_t gen = atomic_load_explicit(&code_gen, memory_order_acquire);
    /* No cache entry on a foreign stack, nor when this thread's cache could not be mapped: walk
     * without remembering. */
    struct entry *e = foreign ? NULL : way(ra, sp0);
    if (e && e->ra == ra && e->sp0 == sp0 && e->rbp0 == rbp0 && e->gen == gen &&
        still_valid(e, sp0)) {
        *id = e->stack;
        *trunc = e->trunc;
        return 1;
    }
    uintptr_t pcs[ML_MAX_DEPTH];
    struct reads rd;
    rd.n = foreign ? -1 : 0;
    rd.foreign = foreign;
    int t = 0;
    int n = walk(ra, sp0, rbp0, hi, pcs, max, &t, &rd);
    if (n < 0 && foreign) {
        pcs[0] = ra; /* a frame we cannot follow on a foreign stack: the caller alone */
        n = 1;
        t = 1;
    }
    if (n < 0)
        return 0;
    *trunc = t;
    *id = ml_stack_intern(pcs, n, t);
    if (e && *id != ML_NO_STACK && rd.n >= 0) {
        e->ra = ra;
        e->sp0 = sp0;
        e->rbp0 = rbp0;
        e->gen = gen;
        e->stack = *id;
        e->trunc = (uint16_t)t;
        e->nreads = (uint16_t)rd.n;
        memcpy(e->off, rd.off, (size_t)rd.n * sizeof rd.off[0]);
        memcpy(e->val, rd.val, (size_t)rd.n * sizeof rd.val[0]);
    }
    return 1;
}
