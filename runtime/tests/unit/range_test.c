/* record/range.c: the private range of sampled blocks, its page bitmaps (in use; retained dirty) and
 * size classes. The debug build checks the bitmaps after every change (pages change hands whole,
 * nothing used below `lowfree` or above the high-water mark, retained pages free and counted);
 * these tests check what a caller sees: alignment, blocks that never overlap and keep their bytes,
 * first fit, runs merged and split, resizing in place, calloc's clearing (and sparseness), freed
 * pages given back when the live blocks grow past them and beyond 64 MiB, the live-bytes account,
 * and a range mapped on demand under an address-space limit. One range per process: the tests run
 * in the order written, and where a block lands (first fit) follows from what the earlier ones
 * left. */
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/record/range.h"
#include "unit.h"

#define PAGE 4096u
#define HDR sizeof(struct ml_block)

static struct ml_block *alloc(size_t size, size_t align, int zero, int *dirty)
{
    int d;
    ml_range_lock();
    struct ml_block *b = ml_range_alloc_locked(size, align, zero, dirty ? dirty : &d);
    ml_range_unlock();
    return b;
}

static void release(struct ml_block *b)
{
    ml_range_lock();
    ml_range_free_locked(b);
    ml_range_unlock();
}

static uintptr_t chunk_of(const struct ml_block *b) { return (uintptr_t)(b + 1) - b->off; }

/* Resident pages of the pages [p, p + len) lies on (mincore). */
static size_t resident(const void *p, size_t len)
{
    static unsigned char vec[1 << 16];
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(PAGE - 1);
    len += (uintptr_t)p - lo;
    p = (const void *)lo;
    size_t n = 0;
    for (size_t at = 0; at < len; at += sizeof vec * PAGE) {
        size_t part = len - at < sizeof vec * PAGE ? len - at : sizeof vec * PAGE;
        CHECK_EQ(mincore((char *)p + at, part, vec), 0);
        for (size_t i = 0; i < (part + PAGE - 1) / PAGE; i++)
            n += vec[i] & 1;
    }
    return n;
}

static int all_zero(const void *p, size_t len)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < len; i++)
        if (c[i])
            return 0;
    return 1;
}

/* The limit `ulimit -v` sets for a process already this big, plus `extra`. */
static rlim_t vm_size_plus(size_t extra)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %lu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return (rlim_t)kb * 1024 + extra;
}

/* Under an address-space limit nothing is reserved ahead: the range is mapped 2 MiB at a time,
 * free() recognises only what is mapped, and at the limit allocation fails (the runtime then counts
 * the sample as untracked) instead of the program losing its own address space. In a child: the
 * range is set up once per process, and the limit must come first. */
TEST(under_an_address_space_limit_the_range_grows_on_demand)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {vm_size_plus(96u << 20), vm_size_plus(96u << 20)};
        CHECK_EQ(setrlimit(RLIMIT_AS, &rl), 0);
        CHECK_EQ(ml_range_init(), 0);
        CHECK_EQ(ml_range_span, 256u << 10); /* the boot arena only: nothing reserved ahead */
        size_t got = 0;
        struct ml_block *b;
        while ((b = alloc(1u << 20, 16, 0, NULL)) != NULL) {
            CHECK(ml_in_range(b + 1));
            CHECK(ml_in_range((char *)(b + 1) + b->size - 1));
            memset(b + 1, 1, b->size); /* mapped read-write */
            got += b->size;
            CHECK(got < (96u << 20));
            if (got >= (96u << 20))
                break;
        }
        /* most of the room under the limit went to the range (ASan's own mappings take some) */
        CHECK(got >= (32u << 20));
        CHECK(!ml_in_range((void *)(ml_range_base + ml_range_span)));
        CHECK(ml_range_span % (2u << 20) == 0 || ml_range_span < (2u << 20));
        fflush(NULL);
        _exit(unit_failed_checks ? 1 : 0);
    }
    int st = 0;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(range_and_boot_arena)
{
    CHECK_EQ(ml_range_init(), 0);
    CHECK_EQ(ml_range_base % PAGE, 0);
    CHECK_EQ(ml_range_span, 64ull << 30); /* no limit here: one reservation */
    CHECK(ml_in_range((void *)ml_range_base));
    CHECK(!ml_in_range((void *)(ml_range_base - 1)));
    CHECK(!ml_in_range((void *)(ml_range_base + ml_range_span)));
    char *prev = NULL;
    for (int i = 0; i < 100; i++) {
        char *p = ml_boot_alloc((size_t)i * 7 + 1);
        CHECK(p && ml_in_range(p) && (uintptr_t)p % 16 == 0);
        CHECK(all_zero(p, (size_t)i * 7 + 1));
        CHECK(!prev || p >= prev + (size_t)(i - 1) * 7 + 1 + HDR);
        memset(p, 0xab, (size_t)i * 7 + 1);
        prev = p;
    }
    CHECK(ml_boot_alloc(1u << 20) == NULL); /* larger than the boot arena */
    CHECK_EQ(ml_range_live_bytes(), 0);     /* the boot arena is not sampled memory */
}

/* Large blocks (more than 32 KiB with the header) take the lowest free run of pages (first fit);
 * freed neighbours merge into one run and a run is split to take only what is needed. */
TEST(large_blocks_first_fit_merge_and_split)
{
    size_t big = 9 * PAGE - HDR; /* exactly nine pages with the header */
    struct ml_block *a = alloc(big, 16, 0, NULL), *b = alloc(big, 16, 0, NULL), *c = alloc(big, 16, 0, NULL);
    CHECK(a && b && c);
    CHECK_EQ(a->cap, 9 * PAGE);
    CHECK_EQ(chunk_of(b), chunk_of(a) + 9 * PAGE);
    CHECK_EQ(chunk_of(c), chunk_of(b) + 9 * PAGE);
    uintptr_t at = chunk_of(a);
    release(a);
    release(b);
    struct ml_block *ab = alloc(18 * PAGE - HDR, 16, 0, NULL); /* the merged run of a and b */
    CHECK_EQ(chunk_of(ab), at);
    release(ab);
    struct ml_block *one = alloc(9 * PAGE - HDR, 16, 0, NULL), *two = alloc(8 * PAGE, 16, 0, NULL);
    CHECK(one && two);
    CHECK_EQ(chunk_of(one), at); /* split: nine pages of the eighteen, then the other nine */
    CHECK_EQ(chunk_of(two), at + 9 * PAGE);
    CHECK_EQ(two->cap, 9 * PAGE);
    struct ml_block *three = alloc(9 * PAGE - HDR, 16, 0, NULL); /* no room left before c: after it */
    CHECK_EQ(chunk_of(three), chunk_of(c) + 9 * PAGE);
    release(one);
    release(two);
    release(three);
    release(c);
    CHECK_EQ(ml_range_live_bytes(), 0);
}

/* realloc in place: a large block grows into the free pages after it, shrinks by giving the tail
 * back (when it shrank below half), and refuses when the next pages are taken; a small one resizes
 * within its class. */
TEST(resizing_in_place)
{
    struct ml_block *a = alloc(10 * PAGE, 16, 0, NULL);
    CHECK(a != NULL);
    memset(a + 1, 0x11, a->size);
    uintptr_t at = chunk_of(a);
    ml_range_lock();
    CHECK_EQ(ml_range_resize_locked(a, 40 * PAGE), 1);
    ml_range_unlock();
    CHECK_EQ(chunk_of(a), at);
    CHECK_EQ(a->size, 40 * PAGE);
    CHECK(a->cap >= a->off + 40 * PAGE);
    const unsigned char *u = (const unsigned char *)(a + 1);
    CHECK(u[0] == 0x11 && u[10 * PAGE - 1] == 0x11);
    memset(a + 1, 0x22, a->size);
    ml_range_lock();
    CHECK_EQ(ml_range_resize_locked(a, 4 * PAGE), 1); /* below half: the tail goes back */
    ml_range_unlock();
    CHECK_EQ(a->cap, 5 * PAGE);
    struct ml_block *next = alloc(9 * PAGE, 16, 0, NULL);
    CHECK_EQ(chunk_of(next), at + 5 * PAGE); /* the freed tail, first fit */
    ml_range_lock();
    CHECK_EQ(ml_range_resize_locked(a, 20 * PAGE), 0); /* `next` is in the way */
    ml_range_unlock();
    CHECK_EQ(a->size, 4 * PAGE);
    CHECK(u[4 * PAGE - 1] == 0x22);
    release(next);
    release(a);
    struct ml_block *s = alloc(100, 16, 0, NULL);
    ml_range_lock();
    CHECK_EQ(ml_range_resize_locked(s, s->cap - s->off), 1);
    CHECK_EQ(ml_range_resize_locked(s, s->cap - s->off + 1), 0);
    ml_range_unlock();
    release(s);
    CHECK_EQ(ml_range_live_bytes(), 0);
}

/* calloc: fresh pages are zero already and stay untouched (a sparse calloc stays sparse); freed
 * pages are retained dirty, and a cleared block taken from them reads zero. */
TEST(zeroed_blocks_stay_sparse_and_dirty_pages_are_cleared)
{
    size_t len = 32u << 20;
    struct ml_block *b = alloc(len, 16, 1, NULL);
    CHECK(b != NULL);
    /* untouched but for the header and the few pages the previous tests left dirty */
    CHECK(resident(b + 1, len) <= len / PAGE / 100);
    memset(b + 1, 0x5a, len);
    uintptr_t at = chunk_of(b);
    release(b);
    CHECK(resident((void *)at, len) >= len / PAGE); /* retained: freeing does not discard them */
    struct ml_block *dirty_not_zeroed = alloc(len, 16, 0, NULL);
    CHECK_EQ(chunk_of(dirty_not_zeroed), at);
    release(dirty_not_zeroed);
    struct ml_block *z = alloc(len, 16, 1, NULL);
    CHECK_EQ(chunk_of(z), at);
    CHECK(all_zero(z + 1, len));
    release(z);
    /* small chunks: a fresh one is zero (dirty = 0); a reused one says so (dirty = 1) */
    int dirty = -1;
    struct ml_block *s = alloc(200, 16, 1, &dirty);
    CHECK_EQ(dirty, 0);
    CHECK(all_zero(s + 1, 200));
    memset(s + 1, 0xee, 200);
    release(s);
    struct ml_block *s2 = alloc(200, 16, 1, &dirty);
    CHECK(s2 == s);
    CHECK_EQ(dirty, 1);
    release(s2);
}

/* Freed pages stay resident only while the range holds less than its own high-water mark: when
 * the live blocks grow past it, the freed pages not reused go back (all but a floor of 256 KiB), and
 * read as zero when a cleared block is taken from them. (The earlier tests left a live high-water
 * mark of a little over 32 MiB.) */
TEST(freed_pages_go_back_when_the_live_blocks_grow_past_them)
{
    size_t len = 8u << 20, floor_pages = (256u << 10) / PAGE;
    struct ml_block *a = alloc(len, 16, 0, NULL);
    CHECK(a != NULL);
    memset(a + 1, 0x77, len);
    uintptr_t at = chunk_of(a);
    struct ml_block *after = alloc(64u << 10, 16, 0, NULL); /* so that nothing larger fits at `at` */
    CHECK_EQ(chunk_of(after), at + a->cap);
    release(a);
    CHECK(resident((void *)at, len) >= len / PAGE); /* below the high-water mark: kept */
    /* 64 MiB more, untouched: the live bytes pass the high-water mark */
    struct ml_block *big = alloc(64u << 20, 16, 0, NULL);
    CHECK(big != NULL);
    CHECK(chunk_of(big) != at);
    CHECK(resident((void *)at, len) <= floor_pages);
    struct ml_block *z = alloc(len, 16, 1, NULL);
    CHECK_EQ(chunk_of(z), at);
    CHECK(all_zero(z + 1, len));
    release(z);
    release(after);
    release(big);
}

/* Freed pages are kept resident up to 64 MiB; beyond that they go back to the kernel. */
TEST(freed_pages_beyond_64_mib_go_back)
{
    size_t len = 160u << 20;
    struct ml_block *b = alloc(len, 16, 0, NULL);
    CHECK(b != NULL);
    memset(b + 1, 1, len);
    uintptr_t at = chunk_of(b);
    size_t cap = b->cap;
    release(b);
    size_t kept = resident((void *)at, cap);
    CHECK(kept * PAGE <= (64u << 20) + (8u << 20)); /* plus what the earlier tests retained */
    /* and a block on those pages still reads what calloc promises */
    struct ml_block *z = alloc(len, 16, 1, NULL);
    CHECK_EQ(chunk_of(z), at);
    CHECK(all_zero(z + 1, len));
    release(z);
}

/* Small sizes get the smallest class that fits: at most 25% slack, 16-byte multiples. */
TEST(size_classes_fit_with_little_slack)
{
    for (size_t s = 1; s + HDR <= (32u << 10); s += 1 + s / 64) {
        struct ml_block *b = alloc(s, 16, 0, NULL);
        CHECK(b != NULL);
        size_t need = s + HDR;
        CHECK(b->cap >= need && b->cap % 16 == 0);
        CHECK(need <= 64 ? b->cap == 64 : b->cap - need < need / 4);
        CHECK(ml_range_fits(b, b->cap - b->off));
        CHECK(!ml_range_fits(b, b->cap - b->off + 1));
        release(b);
    }
}

struct live {
    struct ml_block *b;
    size_t align;
    unsigned char fill;
};

/* The bytes of a block the model checks: its first and last, and two around every page boundary
 * (writing every byte of megabytes of blocks would make this test slow, and catches no more). */
#define EACH_PROBE(n, i) for (size_t i = 0; i < (n); i = i % PAGE == 0 && i + PAGE - 1 < (n) ? i + PAGE - 1 : i + 1)

static void fill(const struct live *l)
{
    unsigned char *u = (unsigned char *)(l->b + 1);
    EACH_PROBE(l->b->size, i)
        u[i] = l->fill;
    u[l->b->size - 1] = l->fill;
}

/* Do the bytes fill() wrote for a block of `n` bytes hold `fill` (or zero, for a cleared block:
 * fill 0), those below `limit` (what a resize kept)? */
static int holds_below(const struct live *l, size_t n, size_t limit)
{
    const unsigned char *u = (const unsigned char *)(l->b + 1);
    EACH_PROBE(n, i)
        if (i < limit && u[i] != l->fill)
            return 0;
    return n - 1 >= limit || u[n - 1] == l->fill;
}

static int holds(const struct live *l) { return holds_below(l, l->b->size, l->b->size); }

static int overlaps(const struct live *set, int n, const struct ml_block *b)
{
    uintptr_t lo = chunk_of(b), hi = lo + b->cap;
    for (int i = 0; i < n; i++) {
        uintptr_t l2 = chunk_of(set[i].b), h2 = l2 + set[i].b->cap;
        if (set[i].b != b && lo < h2 && l2 < hi)
            return 1;
    }
    return 0;
}

static size_t random_size(struct unit_rng *r)
{
    switch (unit_below(r, 8)) {
    case 0:
        return 1 + unit_below(r, 16);
    case 1:
    case 2:
    case 3:
        return 1 + unit_below(r, 2048);
    case 4:
    case 5:
        return 1 + unit_below(r, 40000);
    case 6:
        return 1 + unit_below(r, 1u << 20);
    default:
        return 1 + unit_below(r, 6u << 20);
    }
}

/* A model check: 20000 random allocations (every class, page runs, alignments up to 64 KiB, cleared
 * or not), frees and resizes against a list of what must be live. Each block is aligned, inside the
 * range, overlaps no other and keeps its bytes; cleared ones read zero; the live-bytes account is
 * the sum of the live chunks. */
TEST(random_operations_against_a_model)
{
    static struct live set[600];
    int n = 0;
    struct unit_rng r = {2024};
    static const size_t aligns[] = {16, 16, 16, 32, 64, 256, 4096, 65536};
    for (int op = 0; op < 20000; op++) {
        int what = (int)unit_below(&r, 10);
        if (n < 600 && (what < 5 || n == 0)) {
            size_t size = random_size(&r), align = aligns[unit_below(&r, 8)];
            int zero = unit_below(&r, 4) == 0, dirty = 0;
            struct ml_block *b = alloc(size, align, zero, &dirty);
            CHECK(b != NULL);
            if (!b)
                continue;
            CHECK((uintptr_t)(b + 1) % align == 0);
            CHECK(ml_in_range(b + 1) && ml_in_range((char *)(b + 1) + size - 1));
            CHECK_EQ(b->size, size);
            CHECK(b->off + size <= b->cap);
            CHECK(!overlaps(set, n, b));
            set[n] = (struct live){b, align, 0};
            if (zero && !dirty) /* a large block is cleared by the range; a small one says so */
                CHECK(holds(&set[n]));
            set[n].fill = (unsigned char)(1 + unit_below(&r, 255));
            fill(&set[n]);
            n++;
        } else if (what < 8) {
            int i = (int)unit_below(&r, (uint64_t)n);
            CHECK(holds(&set[i]));
            release(set[i].b);
            set[i] = set[--n];
        } else {
            int i = (int)unit_below(&r, (uint64_t)n);
            if (set[i].align != 16)
                continue;
            size_t to = random_size(&r), old = set[i].b->size;
            struct live was = set[i];
            ml_range_lock();
            int ok = ml_range_resize_locked(set[i].b, to);
            ml_range_unlock();
            CHECK(chunk_of(set[i].b) == chunk_of(was.b));
            if (ok) {
                CHECK_EQ(set[i].b->size, to);
                CHECK(holds_below(&set[i], old, to)); /* what was kept is unchanged */
                fill(&set[i]);
                CHECK(!overlaps(set, n, set[i].b));
            } else {
                CHECK_EQ(set[i].b->size, old);
            }
        }
        if (op % 1000 == 0) {
            int64_t live = 0;
            for (int i = 0; i < n; i++)
                live += (int64_t)set[i].b->cap;
            CHECK_EQ(ml_range_live_bytes(), live);
        }
        if (unit_failed_checks)
            return;
    }
    while (n)
        release(set[--n].b);
    CHECK_EQ(ml_range_live_bytes(), 0);
}
