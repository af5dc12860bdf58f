/* store/stacks.c: the lock-free stack table. One table per process (sized at start-up), here 1024
 * stacks (MEMLENS_MAX_STACKS, its minimum), shared by the tests in the order they are written: each
 * uses frames of its own, and the one that fills the table comes last. The debug build checks every
 * record it hands out (its frames still hash to its hash, counts never negative). */
#include <pthread.h>

#include "../../src/store/stacks.h"
#include "../../src/store/state.h"
#include "unit.h"

static void init_once(void)
{
    static int done;
    if (done++)
        return;
    setenv("MEMLENS_MAX_STACKS", "1024", 1);
    CHECK_EQ(ml_stacks_init(), 0);
    CHECK_EQ(ml_stacks_max(), 1024);
}

/* A stack of `depth` frames from a seed: distinct seeds give distinct stacks. */
static int make(uintptr_t *pcs, uint64_t seed, int depth)
{
    struct unit_rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
    for (int i = 0; i < depth; i++)
        pcs[i] = 0x400000 + (unit_next(&r) & 0xffffff);
    return depth;
}

static int same_frames(const struct ml_stack *r, const uintptr_t *pcs, int depth, int trunc)
{
    if (r->depth != (uint32_t)depth || (r->flags & 1) != (uint32_t)trunc)
        return 0;
    for (int i = 0; i < depth; i++)
        if (r->pcs[i] != pcs[i])
            return 0;
    return 1;
}

TEST(interning_finds_the_same_record_again)
{
    init_once();
    uintptr_t a[64], b[64];
    uint32_t before = ml_stack_count();
    make(a, 1, 12);
    uint32_t id = ml_stack_intern(a, 12, 0);
    CHECK(id != ML_NO_STACK);
    CHECK_EQ(ml_stack_intern(a, 12, 0), id);
    CHECK(same_frames(ml_stack_get(id), a, 12, 0));
    /* what makes a stack another one: a truncated walk, a frame less, two frames swapped, one
     * frame changed, no frame at all */
    uint32_t trunc = ml_stack_intern(a, 12, 1), shorter = ml_stack_intern(a, 11, 0);
    memcpy(b, a, sizeof a);
    b[3] = a[4];
    b[4] = a[3];
    uint32_t swapped = ml_stack_intern(b, 12, 0);
    b[3] = a[3] + 1;
    b[4] = a[4];
    uint32_t changed = ml_stack_intern(b, 12, 0), empty = ml_stack_intern(NULL, 0, 0);
    uint32_t ids[] = {id, trunc, shorter, swapped, changed, empty};
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            CHECK(ids[i] != ids[j]);
    CHECK(same_frames(ml_stack_get(trunc), a, 12, 1));
    CHECK(same_frames(ml_stack_get(shorter), a, 11, 0));
    CHECK(same_frames(ml_stack_get(empty), a, 0, 0));
    CHECK_EQ(ml_stack_intern(NULL, 0, 0), empty);
    CHECK_EQ(ml_stack_intern(a, 12, 7), trunc); /* any non-zero flag is "truncated" */
    CHECK_EQ(ml_stack_count(), before + 6);
    /* a fresh record counts nothing */
    struct ml_stack *r = ml_stack_get(swapped);
    CHECK_EQ(r->samples + r->alloc_fx + r->alloc_bytes, 0);
    CHECK_EQ(r->inuse_fx + r->inuse_bytes + r->peak_fx + r->peak_bytes, 0);
}

/* Recursion: many stacks made of the same three return addresses in different orders. A hash that
 * is linear in the frames gives them a few values, and the table's probes overflow long before it
 * is full; each must get a record of its own and be found again. */
TEST(recursive_stacks_of_few_addresses_stay_apart)
{
    init_once();
    const uintptr_t f[3] = {0x401010, 0x401020, 0x401030};
    uint32_t ids[300];
    uint32_t before = ml_stack_count();
    for (int k = 0; k < 300; k++) {
        uintptr_t pcs[40];
        for (int i = 0, pow3[6] = {1, 3, 9, 27, 81, 243}; i < 40; i++)
            pcs[i] = f[(k / pow3[i % 6]) % 3]; /* k's base-3 digits, repeated: all different */
        ids[k] = ml_stack_intern(pcs, 40, 0);
        CHECK(ids[k] != ML_NO_STACK);
        CHECK_EQ(ml_stack_intern(pcs, 40, 0), ids[k]);
    }
    CHECK_EQ(ml_stack_count(), before + 300);
    CHECK_EQ(ml_stacks_full_drops(), 0);
}

struct racer {
    int which;
    uint32_t ids[200];
};

static void *race(void *arg)
{
    struct racer *r = arg;
    for (int k = 0; k < 200; k++) {
        int s = r->which % 2 ? 199 - k : (k * 7 + r->which) % 200; /* different orders */
        uintptr_t pcs[64];
        int d = make(pcs, 100000 + (uint64_t)s, 8 + s % 50);
        r->ids[s] = ml_stack_intern(pcs, d, s % 5 == 0);
    }
    return NULL;
}

/* Four threads intern the same 200 stacks at once, in different orders: each stack gets one
 * record (lost publication races waste a record, never make two), and the count grows by 200. */
TEST(concurrent_interning_publishes_one_record_per_stack)
{
    init_once();
    uint32_t before = ml_stack_count();
    static struct racer r[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        r[i].which = i;
        CHECK_EQ(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(ml_stack_count(), before + 200);
    for (int s = 0; s < 200; s++) {
        uintptr_t pcs[64];
        int d = make(pcs, 100000 + (uint64_t)s, 8 + s % 50);
        CHECK(r[0].ids[s] != ML_NO_STACK);
        for (int i = 1; i < 4; i++)
            CHECK_EQ(r[i].ids[s], r[0].ids[s]);
        CHECK(same_frames(ml_stack_get(r[0].ids[s]), pcs, d, s % 5 == 0));
    }
}

struct visit {
    uint32_t n;
    struct ml_stack *seen[1100];
};

static void count_one(struct ml_stack *r, void *arg)
{
    struct visit *v = arg;
    if (v->n < 1100)
        v->seen[v->n] = r;
    v->n++;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Both walks (the slots, the dense list a peak snapshot uses) visit every published record exactly
 * once. */
TEST(walks_visit_every_record_once)
{
    init_once();
    static struct visit slots, listed;
    memset(&slots, 0, sizeof slots);
    memset(&listed, 0, sizeof listed);
    ml_stacks_each(count_one, &slots);
    ml_stacks_each_listed(count_one, &listed);
    CHECK_EQ(slots.n, ml_stack_count());
    CHECK_EQ(listed.n, ml_stack_count());
    qsort(slots.seen, slots.n, sizeof(void *), cmp_ptr);
    qsort(listed.seen, listed.n, sizeof(void *), cmp_ptr);
    for (uint32_t i = 1; i < slots.n; i++)
        CHECK(slots.seen[i] != slots.seen[i - 1]);
    for (uint32_t i = 0; i < listed.n && i < slots.n; i++) /* the same set */
        CHECK(listed.seen[i] == slots.seen[i]);
}

static void add_some(struct ml_stack *r, void *arg)
{
    uint64_t *k = arg;
    ++*k;
    atomic_store(&r->samples, *k);
    atomic_store(&r->alloc_fx, *k * 65536);
    atomic_store(&r->alloc_bytes, *k * 100);
    atomic_store(&r->inuse_bytes, (int64_t)*k);
    atomic_store(&r->life[3], *k);
}

/* The totals `status` reports are the sums over the table; a reset zeroes what is cumulative and
 * keeps what is live (blocks sampled before it are still freed against their stack). */
TEST(totals_and_reset)
{
    init_once();
    uint64_t k = 0, samples, bytes;
    ml_stacks_each(add_some, &k);
    ml_stacks_totals(&samples, &bytes);
    CHECK_EQ(samples, k * (k + 1) / 2);
    CHECK_EQ(bytes, 100 * k * (k + 1) / 2);
    ml_stacks_zero_alloc();
    ml_stacks_totals(&samples, &bytes);
    CHECK_EQ(samples + bytes, 0);
    uint32_t id = ml_stack_intern(NULL, 0, 0);
    struct ml_stack *r = ml_stack_get(id);
    CHECK(r->inuse_bytes > 0);
    CHECK_EQ(r->life[3], 0);
}

/* A fork child reads its parent's cumulative counts as zero without writing a record; the first
 * write to a record (touch) zeroes it then. Live counts stay: the child inherited the blocks. */
TEST(fork_child_sees_inherited_counts_as_zero)
{
    init_once();
    uint64_t k = 0, samples, bytes;
    ml_stacks_each(add_some, &k);
    uintptr_t pcs[64];
    make(pcs, 1, 12);
    struct ml_stack *r = ml_stack_get(ml_stack_intern(pcs, 12, 0));
    int64_t inuse = r->inuse_bytes;
    uint64_t was = r->samples;
    CHECK(was > 0 && !ml_stack_stale(r));
    ml_stacks_fork_child();
    CHECK(ml_stack_stale(r));
    CHECK_EQ(r->samples, was); /* not written: the pages stay shared with the parent */
    ml_stacks_totals(&samples, &bytes);
    CHECK_EQ(samples + bytes, 0);
    ml_stack_touch(r);
    CHECK(!ml_stack_stale(r));
    CHECK_EQ(r->samples + r->alloc_fx + r->alloc_bytes, 0);
    CHECK_EQ(r->inuse_bytes, inuse);
    atomic_store(&r->samples, 5);
    ml_stack_touch(r); /* a second touch zeroes nothing */
    CHECK_EQ(r->samples, 5);
    ml_stacks_totals(&samples, &bytes);
    CHECK_EQ(samples, 5);
}

/* At its limit the table takes no new stack: the sample is dropped and counted (table_full), the
 * stacks it holds are still found, and nothing blocks. */
TEST(a_full_table_drops_new_stacks_and_counts_them)
{
    init_once();
    uint64_t drops0 = ml_stacks_full_drops();
    uint32_t taken = 0, dropped = 0;
    for (uint64_t s = 1000000; taken + dropped < 2000; s++) {
        uintptr_t pcs[64];
        int d = make(pcs, s, 4 + (int)(s % 40));
        if (ml_stack_intern(pcs, d, 0) == ML_NO_STACK)
            dropped++;
        else
            taken++;
    }
    CHECK_EQ(ml_stack_count(), ml_stacks_max());
    CHECK_EQ(ml_stacks_full_drops() - drops0, dropped);
    CHECK(dropped >= 2000 - ml_stacks_max());
    uintptr_t pcs[64];
    make(pcs, 1, 12);
    CHECK(ml_stack_intern(pcs, 12, 0) != ML_NO_STACK); /* known stacks are still found */
    CHECK_EQ(ml_stacks_full_drops() - drops0, dropped);
    /* the state's header says the same to a reader of the file */
    CHECK_EQ(atomic_load(&ml_st->nstacks), ml_stacks_max());
    CHECK_EQ(atomic_load(&ml_st->table_full), ml_stacks_full_drops());
}
