/* The stack table: deduplicates stacks and holds their counters.
 *
 * Lock-free: an open-addressing array of slots (record id + 1, 0 = empty) over records carved from a
 * bump arena. A new record is filled in first and then published with one CAS on an empty slot;
 * readers only follow published slots. Losing a CAS race wastes one record (rare).
 *
 * Its size is fixed at start-up by MEMLENS_MAX_STACKS (distinct stacks; `memlens run --max-stacks`):
 * up to twice as many slots (the table stays at most half full, so probes stay short; it grows as
 * stacks appear, below), and an arena
 * reserved for that many records at the configured depth (pages used on touch). Memory per distinct
 * stack: its record (sizeof(struct ml_stack) + 8 bytes per frame) + 16-36 bytes of slots and list. When
 * the table holds MAX_STACKS stacks (or the arena is full), a sample of a new stack is dropped:
 * counted in `dropped` like every lost sample, and in `table_full`, which the dump and `ctl status`
 * report with the limit, so a full table is never silent. Nothing blocks and nothing crashes.
 *
 * The records and their list live in the state mapping (state.c): a file in the run directory that
 * outlives the process, whose pages are reserved before a record is written into them. The hash
 * slots stay in private memory (a reader of the file walks the list). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "../base/check.h"
#include "../base/log.h"
#include "modules.h"
#include "stacks.h"
#include "state.h"

#define DEFAULT_MAX_STACKS (1u << 18)
#define MIN_MAX_STACKS 1024u
#define MAX_MAX_STACKS (1u << 25) /* record ids are arena offsets / 8 in 32 bits: 32 GiB of arena */
#define MAX_PROBE 512
#define ARENA_LIMIT (30ull << 30)
static uint32_t max_stacks = DEFAULT_MAX_STACKS;
static uint32_t nslots = 2 * DEFAULT_MAX_STACKS; /* a power of two */
/* Under an address-space limit (ulimit -v) the reservation counts against the program: take a small
 * share of the limit instead. */
static uint64_t arena_size;
#define NSLOTS nslots
#define ARENA_SIZE arena_size

/* The hash slots grow as stacks appear (a program with a thousand stacks touches 16 KiB of them, not
 * its share of 2 MiB: slots are hit at random, a page per 1,024). Generation g is a table of
 * FIRST << g slots; the generations lie one after another in one reservation (at most twice the
 * largest, NSLOTS), touched only when used. A table is half full at most: the inserter that finds
 * it so rehashes it into the next generation (under grow_lock; lookups go on meanwhile) and
 * publishes that. A record inserted into the old table while it is being rehashed may be missed
 * by the new one; its stack then gets a second record later, which a dump writes as a second line
 * with the same frames (the reader adds them up). Old tables stay mapped: a lookup may still be
 * walking one. */
#define FIRST_SLOTS 4096u
static _Atomic uint32_t *slot_space;
static _Atomic uint32_t slot_gen;
static _Atomic int grow_lock;
static _Atomic int unlisted; /* a record is in the slots but not in the list */

static uint32_t gen_size(uint32_t g) { return (FIRST_SLOTS < NSLOTS ? FIRST_SLOTS : NSLOTS) << g; }
static _Atomic uint32_t *gen_table(uint32_t g) { return slot_space + (gen_size(g) - gen_size(0)); }
static _Atomic uint32_t *listed; /* record id + 1 in creation order (0 = being published) */
static char *arena;
/* In the state's header, where a reader of the file finds them: the arena's used bytes (from 8: id
 * 0 would be offset 0), the records listed, and the samples of new stacks the full table could not
 * take. */
#define arena_used (ml_st->arena_used)
#define nstacks (ml_st->nstacks)
#define full_drops (ml_st->table_full)

/* MEMLENS_MAX_STACKS: decimal, clamped to [MIN_MAX_STACKS, MAX_MAX_STACKS]; unset or bad = default. */
static void read_max_stacks(void)
{
    const char *s = getenv("MEMLENS_MAX_STACKS");
    uint64_t v = 0;
    int n = 0;
    for (; s && s[n] >= '0' && s[n] <= '9' && v <= MAX_MAX_STACKS; n++)
        v = v * 10 + (uint64_t)(s[n] - '0');
    if (!s || !n || s[n])
        return;
    max_stacks = v < MIN_MAX_STACKS ? MIN_MAX_STACKS : v > MAX_MAX_STACKS ? MAX_MAX_STACKS : (uint32_t)v;
}

int ml_stacks_init(void)
{
    read_max_stacks();
    uint64_t record = (sizeof(struct ml_stack) + (uint64_t)ml_cfg.max_depth * sizeof(uintptr_t) + 7) & ~7ull;
    arena_size = ((uint64_t)max_stacks * record + 8 + 4095) & ~4095ull;
    if (arena_size > ARENA_LIMIT)
        arena_size = ARENA_LIMIT;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 64 < arena_size)
        arena_size = rl.rlim_cur / 64 < (1u << 20) ? (1u << 20) : (rl.rlim_cur / 64) & ~4095ull;
    /* No more slots than records the arena can hold (under ulimit -v the slots count too). */
    if (arena_size / sizeof(struct ml_stack) < max_stacks)
        max_stacks = (uint32_t)(arena_size / sizeof(struct ml_stack));
    for (nslots = MIN_MAX_STACKS; nslots < 2 * max_stacks; nslots *= 2)
        ;
    size_t slot_bytes = 2 * (size_t)NSLOTS * sizeof(uint32_t); /* every generation, one after another */
    void *s = mmap(NULL, slot_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) {
        ml_fail("cannot map the stack table's slots (0x%zx bytes for MEMLENS_MAX_STACKS %u): %m", slot_bytes,
                max_stacks);
        return -1;
    }
    _Atomic uint32_t *l;
    char *a;
    if (ml_state_init(NSLOTS, ARENA_SIZE, &l, &a) != 0) { /* it said why */
        munmap(s, slot_bytes);
        return -1;
    }
    /* at least a page: MEMLENS_MAX_STACKS 1024 at the default depth is ~700 KiB */
    ML_ASSERT(ARENA_SIZE >= 4096 && ARENA_SIZE <= ARENA_LIMIT && ARENA_SIZE % 4096 == 0);
    atomic_store(&arena_used, 8);
    ml_st->max_stacks = max_stacks;
    listed = l;
    arena = a;
    slot_space = s;
    return 0;
}

/* Record ids are arena offsets / 8: 0 is never one, and a record ends inside the arena's used part. */
static inline int id_ok(uint32_t id)
{
    uint64_t used = atomic_load_explicit(&arena_used, memory_order_relaxed);
    return id != 0 && id != ML_NO_STACK && (uint64_t)id * 8 + sizeof(struct ml_stack) <= used &&
           (uint64_t)id * 8 + sizeof(struct ml_stack) <= ARENA_SIZE;
}

static uint64_t hash_pcs(const uintptr_t *pcs, int depth, int trunc);

/* What holds for every published record: its frames are those it was hashed from (records are
 * immutable once published; only the counters move), and its live and peak counts are sums of the
 * weights of live blocks, never negative (a free subtracts exactly what its allocation added, after
 * it). Debug builds only: the hash walks the frames. */
static inline int record_ok(const struct ml_stack *r)
{
    return r->depth <= ML_MAX_DEPTH && (r->flags & ~ML_STACK_FLAGS) == 0 &&
           r->hash == hash_pcs(r->pcs, (int)r->depth, (int)r->flags) &&
           atomic_load_explicit(&r->inuse_fx, memory_order_relaxed) >= 0 &&
           atomic_load_explicit(&r->inuse_bytes, memory_order_relaxed) >= 0 &&
           atomic_load_explicit(&r->peak_fx, memory_order_relaxed) >= 0 &&
           atomic_load_explicit(&r->peak_bytes, memory_order_relaxed) >= 0;
}

struct ml_stack *ml_stack_get(uint32_t id)
{
    ML_ASSERT(id_ok(id));
    struct ml_stack *r = (struct ml_stack *)(arena + (uint64_t)id * 8);
    ML_ASSERT(record_ok(r));
    return r;
}

uint32_t ml_stack_count(void) { return atomic_load_explicit(&nstacks, memory_order_relaxed); }

uint32_t ml_stacks_max(void) { return max_stacks; }

uint64_t ml_stacks_full_drops(void) { return atomic_load_explicit(&full_drops, memory_order_relaxed); }

/* Each frame is mixed on its own (a 64x64->128 multiply of the pc and its position, folded), so
 * the hash is not linear in the pcs: a linear one (sum of pc * per-position constant) gives every
 * recursive stack made of the same few return addresses in another order one of a few thousand
 * values, and such a table overflows its probes at a third full. The frames' multiplies do not
 * depend on each other (only the adds do), so the CPU overlaps them. */
static uint64_t hash_pcs(const uintptr_t *pcs, int depth, int trunc)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)depth ^ ((uint64_t)trunc << 40);
    for (int i = 0; i < depth; i++) {
        __uint128_t m = (__uint128_t)(pcs[i] ^ (0xff51afd7ed558ccdull * (uint64_t)(i + 1))) *
                        0xc4ceb9fe1a85ec53ull;
        h += (uint64_t)m ^ (uint64_t)(m >> 64);
    }
    h ^= h >> 32;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

static int same(const struct ml_stack *r, uint64_t h, const uintptr_t *pcs, int depth, int trunc)
{
    ML_ASSERT(record_ok(r));
    if (r->hash != h || r->depth != (uint32_t)depth || r->flags != (uint32_t)trunc)
        return 0;
    for (int i = 0; i < depth; i++)
        if (r->pcs[i] != pcs[i])
            return 0;
    return 1;
}

static uint32_t new_record(uint64_t h, const uintptr_t *pcs, int depth, int trunc)
{
    uint64_t size = (sizeof(struct ml_stack) + (uint64_t)depth * sizeof(uintptr_t) + 7) & ~7ull;
    /* room first: on a full filesystem the arena must not grow by records never written */
    uint64_t used = atomic_load_explicit(&arena_used, memory_order_relaxed);
    if (used + size <= ARENA_SIZE && ml_state_arena_room(used + size) != 0)
        return ML_NO_STACK;
    uint64_t off = atomic_fetch_add_explicit(&arena_used, size, memory_order_relaxed);
    if (off + size > ARENA_SIZE || off / 8 >= ML_NO_STACK) {
        atomic_fetch_add_explicit(&full_drops, 1, memory_order_relaxed); /* the table is full */
        return ML_NO_STACK;
    }
    if (ml_state_arena_room(off + size) != 0)
        return ML_NO_STACK; /* no room in the state file (a full filesystem) */
    ML_ASSERT(off >= 8 && off % 8 == 0 && size % 8 == 0 && size >= sizeof(struct ml_stack));
    struct ml_stack *r = (struct ml_stack *)(arena + off);
    r->hash = h;
    r->depth = (uint32_t)depth;
    r->flags = (uint32_t)trunc;
    for (int i = 0; i < depth; i++)
        r->pcs[i] = pcs[i];
    ml_state_modules_note(pcs, depth); /* the modules its frames lie in, for a reader of the file */
    return (uint32_t)(off / 8);
}

/* Rehash generation g into g + 1 and publish it. One grower at a time: one that finds the lock taken
 * goes on (the table has room for a while yet). */
static ML_NOINLINE void grow(uint32_t g)
{
    if (gen_size(g + 1) > NSLOTS || atomic_exchange_explicit(&grow_lock, 1, memory_order_acquire))
        return;
    if (atomic_load_explicit(&slot_gen, memory_order_acquire) == g) {
        _Atomic uint32_t *from = gen_table(g), *to = gen_table(g + 1);
        uint32_t n = gen_size(g), mask = gen_size(g + 1) - 1;
        /* Empty first: a fork child whose parent was growing inherits a half-filled next table (its
         * pages are touched by the rehash anyway, one slot in four taken). */
        for (uint32_t i = 0; i <= mask; i++)
            atomic_store_explicit(&to[i], 0, memory_order_relaxed);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t s = atomic_load_explicit(&from[i], memory_order_acquire);
            if (!s)
                continue;
            uint32_t idx = (uint32_t)(ml_stack_get(s - 1)->hash >> 20) & mask;
            while (atomic_load_explicit(&to[idx], memory_order_relaxed))
                idx = (idx + 1) & mask;
            atomic_store_explicit(&to[idx], s, memory_order_relaxed);
        }
        atomic_store_explicit(&slot_gen, g + 1, memory_order_release);
    }
    atomic_store_explicit(&grow_lock, 0, memory_order_release);
}

uint32_t ml_stack_intern(const uintptr_t *pcs, int depth, int trunc)
{
    if (!slot_space)
        return ML_NO_STACK;
    trunc = (trunc ? (int)ML_STACK_TRUNC : 0) | (int)ml_tls.stack_flags; /* from here on: the flags */
    ML_ASSERT(depth >= 0 && depth <= ML_MAX_DEPTH && (pcs || !depth));
    uint64_t h = hash_pcs(pcs, depth, trunc);
    uint32_t mine = ML_NO_STACK;
    uint32_t g = atomic_load_explicit(&slot_gen, memory_order_acquire), mask = gen_size(g) - 1;
    _Atomic uint32_t *slots = gen_table(g);
    uint32_t idx = (uint32_t)(h >> 20) & mask;
    for (int probe = 0; probe < MAX_PROBE; probe++, idx = (idx + 1) & mask) {
        uint32_t s = atomic_load_explicit(&slots[idx], memory_order_acquire);
        if (s == 0) {
            /* At the limit (a few over when threads race: the slots have room) a new stack is not
             * taken; its sample is dropped and counted as such (table_full). */
            uint32_t n0 = atomic_load_explicit(&nstacks, memory_order_relaxed);
            if (mine == ML_NO_STACK && n0 >= max_stacks)
                break;
            /* The state file has no room for the record or its list entry (a full filesystem;
             * the entry is reserved first, so that no record a reader of the file cannot find
             * holds samples): dropped and counted by the caller, not as table_full. */
            if (mine == ML_NO_STACK &&
                (ml_state_listed_room(n0 + 1) != 0 || (mine = new_record(h, pcs, depth, trunc)) == ML_NO_STACK))
                return ML_NO_STACK;
            if (atomic_compare_exchange_strong_explicit(&slots[idx], &s, mine + 1, memory_order_release,
                                                        memory_order_acquire)) {
                uint32_t n = atomic_fetch_add_explicit(&nstacks, 1, memory_order_relaxed);
                ML_ASSERT(n < NSLOTS); /* one list entry per slot taken */
                if (n < NSLOTS && ml_state_listed_room(n + 1) == 0)
                    atomic_store_explicit(&listed[n], mine + 1, memory_order_release);
                else
                    atomic_store_explicit(&unlisted, 1, memory_order_relaxed);
                if (unlikely((uint64_t)(n + 1) * 2 > mask + 1))
                    grow(g);
                return mine;
            }
        }
        ML_ASSERT(s != 0 && id_ok(s - 1)); /* a lost CAS left the winner's id */
        if (same(ml_stack_get(s - 1), h, pcs, depth, trunc))
            return s - 1;
    }
    atomic_fetch_add_explicit(&full_drops, 1, memory_order_relaxed);
    return ML_NO_STACK;
}

/* Visit every published record: through the list, which holds as many entries as there are records
 * (the slots are twice as many, mostly empty: walking them read 2 MiB in every dump, and made each
 * of a fork-heavy program's children fault 512 pages in at exit), unless a record could not be
 * listed (its page of the list could not be reserved: a full filesystem). A record published a
 * moment ago and not listed yet is left to the next walk. */
void ml_stacks_each(void (*fn)(struct ml_stack *, void *), void *arg)
{
    if (!atomic_load_explicit(&unlisted, memory_order_relaxed)) {
        ml_stacks_each_listed(fn, arg);
        return;
    }
    if (!slot_space)
        return;
    uint32_t g = atomic_load_explicit(&slot_gen, memory_order_acquire);
    _Atomic uint32_t *slots = gen_table(g);
    for (uint32_t i = 0; i < gen_size(g); i++) {
        uint32_t s = atomic_load_explicit(&slots[i], memory_order_acquire);
        if (s)
            fn(ml_stack_get(s - 1), arg);
    }
}

void ml_stacks_each_listed(void (*fn)(struct ml_stack *, void *), void *arg)
{
    if (!listed)
        return;
    uint32_t n = atomic_load_explicit(&nstacks, memory_order_relaxed);
    for (uint32_t i = 0; i < n && i < NSLOTS; i++) {
        uint32_t s = atomic_load_explicit(&listed[i], memory_order_acquire);
        ML_ASSERT(!s || id_ok(s - 1));
        if (s)
            fn(ml_stack_get(s - 1), arg);
    }
}

struct totals {
    uint64_t samples, bytes;
};

static void add_totals(struct ml_stack *r, void *arg)
{
    struct totals *t = arg;
    if (ml_stack_stale(r))
        return;
    t->samples += atomic_load_explicit(&r->samples, memory_order_relaxed);
    t->bytes += atomic_load_explicit(&r->alloc_bytes, memory_order_relaxed);
}

void ml_stacks_totals(uint64_t *samples, uint64_t *alloc_bytes)
{
    struct totals t = {0, 0};
    ml_stacks_each(add_totals, &t);
    *samples = t.samples;
    *alloc_bytes = t.bytes;
}

static void zero_alloc(struct ml_stack *r, void *arg)
{
    (void)arg;
    atomic_store_explicit(&r->samples, 0, memory_order_relaxed);
    atomic_store_explicit(&r->alloc_fx, 0, memory_order_relaxed);
    atomic_store_explicit(&r->alloc_bytes, 0, memory_order_relaxed);
    for (int i = 0; i < 10; i++) /* lifetimes are cumulative too (ML_LIFE_BUCKETS) */
        atomic_store_explicit(&r->life[i], 0, memory_order_relaxed);
}

void ml_stacks_zero_alloc(void)
{
    atomic_store_explicit(&full_drops, 0, memory_order_relaxed); /* counted since start, like `dropped` */
    ml_stacks_each(zero_alloc, NULL);
}

/* After a fork, the child's cumulative counts start at zero, but zeroing every record would copy
 * the whole arena (copy-on-write, up to 256 MiB) in every child. Instead the child keeps one bit
 * per record id, set the first time it samples into the record (which zeroes it then); a record
 * without its bit still holds the parent's cumulative counts, which read as zero. Live (inuse)
 * counts are the child's own from the start: it inherited the blocks. */
static _Atomic(uint64_t *) fresh;
#define FRESH_BYTES (ARENA_SIZE / 8 / 8)

static uint64_t fresh_bit(const struct ml_stack *r, uint64_t **word)
{
    uint64_t id = (uint64_t)((const char *)r - arena) / 8;
    ML_ASSERT((const char *)r > arena && ((const char *)r - arena) % 8 == 0 && id / 64 < FRESH_BYTES / 8);
    *word = atomic_load_explicit(&fresh, memory_order_acquire);
    if (*word)
        *word += id / 64;
    return 1ull << (id % 64);
}

int ml_stack_stale(const struct ml_stack *r)
{
    uint64_t *w, bit = fresh_bit(r, &w);
    return w && !(__atomic_load_n(w, __ATOMIC_ACQUIRE) & bit);
}

void ml_stack_touch(struct ml_stack *r)
{
    uint64_t *w, bit = fresh_bit(r, &w);
    if (!w || (__atomic_load_n(w, __ATOMIC_RELAXED) & bit))
        return;
    if (!(__atomic_fetch_or(w, bit, __ATOMIC_ACQ_REL) & bit))
        zero_alloc(r, NULL);
    ML_ASSERT(!ml_stack_stale(r));
}

void ml_stacks_fork_child(void)
{
    atomic_store(&grow_lock, 0); /* a thread of the parent may have held it */
    atomic_store_explicit(&full_drops, 0, memory_order_relaxed); /* the child's own, like `dropped` */
    uint64_t *old = atomic_load(&fresh);
    void *f = mmap(NULL, FRESH_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    atomic_store(&fresh, f == MAP_FAILED ? NULL : (uint64_t *)f);
    if (old)
        munmap(old, FRESH_BYTES);
    if (f == MAP_FAILED)
        ml_stacks_zero_alloc();
}
