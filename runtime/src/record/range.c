/* The private address range: sampled blocks and the boot arena live here, so free() recognises them
 * with one unsigned compare and never touches an unsampled block.
 *
 * Layout: [boot arena | pages...], managed in 4 KiB pages by a bitmap (bit set = page in use):
 *   - large blocks (more than SMALL_MAX with the header) take a run of whole pages, first fit. Free
 *     neighbours merge by construction (a run is just clear bits) and a run is split by taking only
 *     what is needed. Freed pages stay resident for reuse (a program that frees and allocates big
 *     buffers in a loop would otherwise fault every page in again, which it does not do over its own
 *     allocator: 40x slower here for a 1 MiB buffer), but only within what the program has needed
 *     before: at most how far the live blocks are below their own high-water mark and, while the
 *     views run, how far the estimated heap is below its peak (peak.c tells), never less than FLOOR
 *     nor more than RETAIN. A program that frees and allocates at a steady size keeps its pages; one
 *     that grows past what it freed gives the freed pages not reused back to the kernel
 *     (MADV_DONTNEED, highest first), so its peak holds none of them. (Kept up to a fixed 64 MiB,
 *     python3 building a dict and its JSON held ~3 MiB of freed pages at its peak: 5 % of its RSS.)
 *     A second bitmap marks the retained, dirty pages: calloc clears those and only those, so a
 *     sparse calloc stays sparse;
 *   - small blocks come from size classes a quarter of a power of two apart (at most 25% slack),
 *     carved from slabs of pages and recycled through per-class free lists.
 * A large block can grow and shrink in place (realloc), when the pages after it are free.
 *
 * The range never costs a program under `ulimit -v` its address space: with no limit it is one
 * 64 GiB PROT_NONE/MAP_NORESERVE reservation made read-write in 2 MiB steps; under a limit nothing
 * is reserved ahead, the range is mapped step by step at a fixed place (MAP_FIXED_NOREPLACE) and
 * ml_range_span covers only what is mapped. When a mapping fails (the limit is reached) the range stops
 * growing: a sample that finds no room is counted as allocated but not tracked live (`untracked`). Sampling is rare (one
 * block per interval R), so one spin lock is enough here. block.c takes it: a sampled block's memory
 * and its accounting change together, under one lock, so the functions below expect it held. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <x86intrin.h>

#include "../base/check.h"
#include "../base/log.h"
#include "../base/proc.h"
#include "../base/views.h"
#include "range.h"

#define RANGE_SIZE (64ull << 30)
#define PAGE 4096u
#define BOOT_SIZE (256u << 10)
#define COMMIT_STEP (2u << 20)
#define SMALL_MAX (32u << 10) /* largest small chunk */
#define SLAB (256u << 10)     /* small chunks are carved from runs of this size */
#define NSMALL 37             /* classes 64, 80, 96, 112, 128, 160, ... 32 KiB */
#define LARGE 0xffffu         /* `cls` of a large block */
#define HDR sizeof(struct ml_block)
#define GROW_HINT 0x3f0000000000ull /* where an unreserved range is mapped (48+ TiB: nobody's) */

uintptr_t ml_range_base, ml_range_span;
static uintptr_t boot_used;   /* bytes of the boot arena handed out */
static uintptr_t committed;   /* bytes from the base that are read-write */
static uintptr_t limit = RANGE_SIZE; /* bytes the range may grow to */
static int grow_mode;         /* nothing reserved ahead: map on demand */
/* One bit per page the range may grow to (mapped at start-up, sized to the range's limit: 2 MiB
 * each for 64 GiB, a few KiB under `ulimit -v`, where a static array would cost the program 4 MiB
 * of its address space). */
static uint64_t *used;
static uint64_t *dirty; /* free pages that hold old data (retained, not given back) */
static uint64_t used_boot[BOOT_SIZE / PAGE / 64], dirty_boot[BOOT_SIZE / PAGE / 64];
static uintptr_t retained;          /* how many */
static uintptr_t dirty_end;         /* no dirty page at or above this index (trim starts there) */
#define RETAIN ((64u << 20) / PAGE)   /* at most this many, whatever the high-water mark */
#define FLOOR ((256u << 10) / PAGE)   /* and at least this many may stay */
static uintptr_t hiwater;     /* page index past the highest page ever used */
static uintptr_t lowfree;     /* no free page below this index */
static void *free_list[NSMALL];
static uintptr_t carve[NSMALL], carve_end[NSMALL];
static _Atomic int lock;
static struct ml_thread *_Atomic owner; /* the thread holding `lock` (a dump must not wait for itself) */
static _Atomic int64_t live_bytes;      /* bytes of the chunks handed out (not the boot arena) */
static int64_t live_max;                /* the highest live_bytes so far (lock held) */
static int64_t heap_room = INT64_MAX;   /* how far the estimated heap is below its peak (peak.c) */
static char fallback_boot[BOOT_SIZE] __attribute__((aligned(64)));

_Static_assert(sizeof(struct ml_block) % 16 == 0, "header keeps 16-byte alignment");

void ml_range_lock(void)
{
    if (unlikely(atomic_exchange_explicit(&lock, 1, memory_order_acquire))) {
        /* Contended: wait, yielding, and tell cost.c how long (it is not the runtime's CPU time). */
        uint64_t w0 = __rdtsc();
        while (atomic_exchange_explicit(&lock, 1, memory_order_acquire))
            sched_yield();
        ml_tls.cost_wait += __rdtsc() - w0;
    }
    atomic_store_explicit(&owner, &ml_tls, memory_order_relaxed);
}

void ml_range_unlock(void)
{
    atomic_store_explicit(&owner, NULL, memory_order_relaxed);
    ml_spin_unlock(&lock);
}

void ml_range_reset_lock(void)
{
    atomic_store(&owner, NULL);
    atomic_store(&lock, 0);
}

int ml_range_lock_bounded(void)
{
    if (atomic_load_explicit(&owner, memory_order_relaxed) == &ml_tls)
        return 0;
    struct timespec nap = {0, 100000};
    for (int i = 0; atomic_exchange_explicit(&lock, 1, memory_order_acquire); i++) {
        if (i == 10000)
            return 0;
        nanosleep(&nap, NULL); /* async-signal-safe: a dump may run in a signal handler */
    }
    atomic_store_explicit(&owner, &ml_tls, memory_order_relaxed);
    return 1;
}

int64_t ml_range_live_bytes(void) { return atomic_load_explicit(&live_bytes, memory_order_relaxed); }
const _Atomic int64_t *ml_range_live_addr(void) { return &live_bytes; }

/* Lock held: a plain add (no bus lock) that readers elsewhere may load at any time. */
static inline void live_add(int64_t d)
{
    int64_t now = atomic_load_explicit(&live_bytes, memory_order_relaxed) + d;
    atomic_store_explicit(&live_bytes, now, memory_order_relaxed);
    if (now > live_max)
        live_max = now;
}

/* How many freed pages may stay resident now (lock held): those that keep the range within the
 * highest it has held (live_max) and, while the views run, the program's estimated heap within its
 * peak (heap_room); at least FLOOR, at most RETAIN. */
static inline uintptr_t retain_room(void)
{
    int64_t below = live_max - atomic_load_explicit(&live_bytes, memory_order_relaxed);
    if (atomic_load_explicit(&ml_views_on, memory_order_relaxed) && heap_room < below)
        below = heap_room;
    uintptr_t pages = below > 0 ? (uintptr_t)below / PAGE : 0;
    return pages < FLOOR ? FLOOR : pages > RETAIN ? RETAIN : pages;
}

/* The bits of word from/64 that the run [from, from+n) covers; *k says how many. */
static inline uint64_t run_mask(uintptr_t from, uintptr_t n, uintptr_t *k)
{
    uintptr_t bit = from % 64;
    *k = 64 - bit < n ? 64 - bit : n;
    return (*k == 64 ? ~0ull : (1ull << *k) - 1) << bit;
}

/* Are the n bits of map from page `from` all set (on) or all clear? For the debug checks. */
static inline int bits_are(const uint64_t *map, uintptr_t from, uintptr_t n, int on)
{
    for (uintptr_t k; n; from += k, n -= k) {
        uint64_t m = run_mask(from, n, &k);
        if ((map[from / 64] & m) != (on ? m : 0))
            return 0;
    }
    return 1;
}

/* Set (on) or clear n bits of map from page `from`, a word at a time (a 4 GiB block is 2^20
 * pages). */
static void set_bits(uint64_t *map, uintptr_t from, uintptr_t n, int on)
{
    ML_ASSERT(from + n <= limit / PAGE && from + n >= from);
    while (n) {
        uintptr_t k;
        uint64_t m = run_mask(from, n, &k);
        if (on)
            map[from / 64] |= m;
        else
            map[from / 64] &= ~m;
        from += k;
        n -= k;
    }
}

/* Pages change hands whole: taken only when free, given back only when taken. */
static void mark(uintptr_t from, uintptr_t n, int on)
{
    ML_ASSERT(bits_are(used, from, n, !on));
    set_bits(used, from, n, on);
}

/* What the page bookkeeping keeps true between calls (lock held; debug builds only, it reads the
 * bitmaps up to the high-water mark): every page below `lowfree` is used; no page at or above
 * `hiwater` is; a dirty page is a free one, below `dirty_end`, and `retained` counts them; what is
 * used is mapped. */
static inline int pages_ok(void)
{
    if (lowfree > hiwater || hiwater * PAGE > committed || committed > limit || retained > RETAIN ||
        dirty_end > hiwater)
        return 0;
    if (!bits_are(used, 0, lowfree, 1) || (hiwater % 64 && !bits_are(used, hiwater, 64 - hiwater % 64, 0)))
        return 0;
    uintptr_t dirty_pages = 0;
    for (uintptr_t w = 0; w < (hiwater + 63) / 64; w++) {
        if ((dirty[w] & used[w]) || (dirty[w] && 64 * w + 64 - (uintptr_t)__builtin_clzll(dirty[w]) > dirty_end))
            return 0;
        dirty_pages += (uintptr_t)__builtin_popcountll(dirty[w]);
    }
    return dirty_pages == retained;
}

/* A chunk of `size` bytes lies past the boot arena, 16-byte aligned, on pages in use. Lock held. */
static inline int chunk_ok(uintptr_t chunk, size_t size)
{
    uintptr_t off = chunk - ml_range_base;
    return chunk % 16 == 0 && size && off >= BOOT_SIZE && off + size <= hiwater * PAGE &&
           bits_are(used, off / PAGE, (off + size - 1) / PAGE - off / PAGE + 1, 1);
}

/* Pages [from, from+n) were just taken: they are no longer retained; with `zero`, the dirty ones
 * are cleared (the others are zero already). Lock held. */
static void claim(uintptr_t from, uintptr_t n, int zero)
{
    if (!retained)
        return;
    for (uintptr_t i = from; i < from + n;) {
        uint64_t w = dirty[i / 64] >> (i % 64);
        if (!w) {
            i += 64 - i % 64;
            continue;
        }
        if (!(w & 1)) {
            i += (uintptr_t)__builtin_ctzll(w); /* to the next dirty page */
            continue;
        }
        dirty[i / 64] &= ~(1ull << (i % 64));
        retained--;
        if (zero)
            memset((void *)(ml_range_base + i * PAGE), 0, PAGE);
        i++;
    }
    ML_ASSERT(bits_are(dirty, from, n, 0));
}

static int map_at(uintptr_t addr, size_t len)
{
    void *p = mmap((void *)addr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    if ((uintptr_t)p != addr) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        munmap(p, len);
        errno = EEXIST;
        return -1;
    }
    return 0;
}

static int reserve(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY) {
        void *p = mmap(NULL, RANGE_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED && mprotect(p, BOOT_SIZE, PROT_READ | PROT_WRITE) == 0) {
            ml_range_base = (uintptr_t)p;
            ml_range_span = RANGE_SIZE;
            return 0;
        }
        if (p != MAP_FAILED)
            munmap(p, RANGE_SIZE);
    }
    /* Under an address-space limit (or when the reservation is refused): map only what is used. */
    for (uintptr_t hint = GROW_HINT; hint >= (1ull << 40); hint -= (1ull << 40)) {
        if (map_at(hint, BOOT_SIZE) == 0) {
            grow_mode = 1;
            ml_range_base = hint;
            ml_range_span = BOOT_SIZE;
            return 0;
        }
        if (errno != EEXIST)
            break;
    }
    return -1;
}

/* The bitmaps, for a range of at most `limit` bytes; 0 or -1. */
static int bitmaps(void)
{
    size_t bytes = ((limit / PAGE + 63) / 64) * 8;
    bytes = (bytes + PAGE - 1) & ~(size_t)(PAGE - 1);
    void *u = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (u == MAP_FAILED) {
        ml_fail("cannot map the bitmaps of the range for sampled blocks (0x%zx bytes): %m", 2 * bytes);
        return -1;
    }
    used = u;
    dirty = (uint64_t *)((char *)u + bytes);
    return 0;
}

/* Address space or commit charge is scarce: an RLIMIT_AS (or a refused reservation: grow_mode), or
 * the kernel's strict overcommit (vm.overcommit_memory 2: every private writable mapping is charged,
 * touched or not). Read once at start-up. */
static int scarce;

int ml_range_scarce(void) { return scarce; }

int ml_range_init(void)
{
    struct rlimit rl;
    int r = reserve();
    char oc[8];
    scarce = grow_mode || (ml_proc_read("/proc/sys/vm/overcommit_memory", oc, sizeof oc) > 0 && oc[0] == '2');
    /* Under an address-space limit the range can never be larger than the limit. */
    if (r == 0 && grow_mode && getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < limit)
        limit = ((uintptr_t)rl.rlim_cur + COMMIT_STEP - 1) & ~(uintptr_t)(COMMIT_STEP - 1);
    if (r != 0)
        ml_fail("cannot reserve the address range for sampled blocks (%llu GiB anywhere, or %u KiB at "
                "0x%llx or below under RLIMIT_AS): %m", RANGE_SIZE >> 30, BOOT_SIZE >> 10, GROW_HINT);
    if (r != 0 || bitmaps() != 0) {
        /* Keep the boot arena working (dlsym needs it) from a static buffer; sampling stays off. */
        if (r == 0)
            munmap((void *)ml_range_base, grow_mode ? BOOT_SIZE : RANGE_SIZE);
        ml_range_base = (uintptr_t)fallback_boot;
        ml_range_span = BOOT_SIZE;
        limit = committed = BOOT_SIZE;
        used = used_boot;
        dirty = dirty_boot;
        mark(0, BOOT_SIZE / PAGE, 1);
        return -1;
    }
    committed = BOOT_SIZE;
    hiwater = lowfree = BOOT_SIZE / PAGE;
    mark(0, BOOT_SIZE / PAGE, 1);
    ML_ASSERT(ml_range_base % PAGE == 0 && pages_ok());
    return 0;
}

/* Memory for allocations made while dlsym runs inside ml_init. Never freed; zeroed. */
void *ml_boot_alloc(size_t size)
{
    size_t need = (HDR + size + 15) & ~(size_t)15;
    void *user = NULL;
    ml_range_lock();
    if (size < BOOT_SIZE && boot_used + need <= BOOT_SIZE) {
        struct ml_block *b = (struct ml_block *)(ml_range_base + boot_used);
        boot_used += need;
        b->kind = ML_KIND_BOOT;
        b->size = size;
        b->cap = need - HDR;
        user = b + 1;
    }
    ML_ASSERT(boot_used <= BOOT_SIZE && boot_used % 16 == 0);
    ml_range_unlock();
    return user;
}

/* Make the range read-write up to `end` bytes from the base. Called with the lock held. */
static int commit(uintptr_t end)
{
    if (end <= committed)
        return 0;
    uintptr_t want = (end + COMMIT_STEP - 1) & ~(uintptr_t)(COMMIT_STEP - 1);
    if (want > limit)
        want = limit;
    int r;
    if (grow_mode) {
        r = map_at(ml_range_base + committed, want - committed);
        if (r != 0 && errno == EEXIST) {
            limit = committed; /* someone else's mapping follows: the range is as big as it gets */
            return -1;
        }
    } else {
        r = mprotect((void *)(ml_range_base + committed), want - committed, PROT_READ | PROT_WRITE);
    }
    if (r != 0) {
        /* An address-space limit (or no memory): the range stays as it is. Sampling goes on: a
         * sample that finds no room is still counted as allocated, only not tracked live
         * (sample.c: `untracked`), and the program keeps the address space for itself. */
        limit = committed;
        return -1;
    }
    committed = want;
    ML_ASSERT(committed <= limit && (committed % COMMIT_STEP == 0 || committed == limit));
    if (grow_mode) /* only now may free() take these addresses for ours */
        __atomic_store_n(&ml_range_span, want, __ATOMIC_RELEASE);
    return 0;
}

/* First fit: the lowest run of n free pages; marks it used and claims it (see claim). Page index or
 * 0. Lock held. The bitmap is read a word at a time: used pages and free runs are skipped with a
 * count of trailing zeros. */
static uintptr_t pages_get(uintptr_t n, int zero)
{
    uintptr_t max = limit / PAGE, start = hiwater, i = lowfree;
    while (i < hiwater) {
        uint64_t f = ~used[i / 64] >> (i % 64); /* free pages from i on, in this word */
        if (!f) {
            i = (i | 63) + 1;
            continue;
        }
        i += (uintptr_t)__builtin_ctzll(f);
        if (i >= hiwater)
            break;
        uintptr_t s = i;
        int ended = 0; /* the run met a used page */
        while (i < hiwater && i - s < n) {
            uint64_t u = used[i / 64] >> (i % 64);
            if (u) {
                i += (uintptr_t)__builtin_ctzll(u);
                ended = 1;
                break;
            }
            i = (i | 63) + 1;
        }
        if (i - s >= n || !ended) { /* long enough, or free up to the high-water mark */
            start = s;
            break;
        }
    }
    if (start + n > max || start + n < start)
        return 0;
    if (start + n > hiwater) { /* extend past the high-water mark */
        if (commit((start + n) * PAGE) != 0)
            return 0;
        hiwater = start + n;
    }
    mark(start, n, 1);
    claim(start, n, zero);
    if (start == lowfree)
        lowfree = start + n;
    ML_ASSERT(start >= BOOT_SIZE / PAGE && start + n <= hiwater && pages_ok());
    return start;
}

/* Pages [from, from + n) go back to the kernel: read as zero when next touched. */
static void give_back(uintptr_t from, uintptr_t n)
{
    if (n)
        madvise((void *)(ml_range_base + from * PAGE), n * PAGE, MADV_DONTNEED);
}

/* The retained pages beyond retain_room() go back, highest first (first fit reuses the lowest), in
 * runs of adjacent pages. Called when the live blocks or the heap estimate grew. Lock held. */
static void trim(void)
{
    uintptr_t room = retain_room(), run_lo = 0, run_hi = 0; /* the run to give back, pending */
    if (retained <= room)
        return;
    for (uintptr_t w = (dirty_end + 63) / 64; w-- > 0 && retained > room;) {
        while (dirty[w] && retained > room) {
            unsigned hi = 63 - (unsigned)__builtin_clzll(dirty[w]); /* the highest dirty page */
            uint64_t clear = ~dirty[w] & (hi == 63 ? ~0ull : (2ull << hi) - 1);
            unsigned lo = clear ? 64 - (unsigned)__builtin_clzll(clear) : 0; /* its run's first */
            uintptr_t n = hi + 1 - lo;
            if (n > retained - room)
                n = retained - room;
            uintptr_t from = w * 64 + hi + 1 - n;
            set_bits(dirty, from, n, 0);
            retained -= n;
            if (from + n != run_lo) { /* not adjacent to the pending run: that one goes first */
                give_back(run_lo, run_hi - run_lo);
                run_hi = from + n;
            }
            run_lo = from;
        }
    }
    give_back(run_lo, run_hi - run_lo);
    dirty_end = run_lo; /* every dirty page above the last one given back went too */
    ML_ASSERT(retained <= retain_room() && pages_ok());
}

void ml_range_heap_room_locked(int64_t below_peak)
{
    heap_room = below_peak > 0 ? below_peak : 0;
    if (retained > FLOOR)
        trim();
}

/* Free pages [first, first + n): retained while there is room (retain_room, from the live bytes
 * after this free), the rest given back. */
static void pages_put(uintptr_t first, uintptr_t n)
{
    ML_ASSERT(n && first >= BOOT_SIZE / PAGE && first + n <= hiwater);
    ML_ASSERT(bits_are(dirty, first, n, 0)); /* a page in use is never counted as retained */
    uintptr_t room = retain_room(), keep = retained < room ? room - retained : 0;
    if (keep > n)
        keep = n;
    set_bits(dirty, first, keep, 1);
    retained += keep;
    if (keep && first + keep > dirty_end)
        dirty_end = first + keep;
    give_back(first + keep, n - keep);
    mark(first, n, 0);
    if (first < lowfree)
        lowfree = first;
    ML_ASSERT(pages_ok());
}

/* Chunk size of small class c: 64, then four steps per power of two (2^e + q·2^(e-2), q = 1..4). */
static inline size_t class_size(unsigned c)
{
    if (c == 0)
        return 64;
    unsigned e = 6 + (c - 1) / 4;
    return ((size_t)1 << e) + (size_t)((c - 1) % 4 + 1) * ((size_t)1 << (e - 2));
}

/* Class index and chunk size of a small need (<= SMALL_MAX). */
static unsigned small_class(size_t need, size_t *size)
{
    ML_ASSERT(need >= HDR && need <= SMALL_MAX);
    if (need <= 64) {
        *size = 64;
        return 0;
    }
    unsigned e = 63 - (unsigned)__builtin_clzll(need - 1);
    *size = ((need - 1) | (((size_t)1 << (e - 2)) - 1)) + 1;
    unsigned c = 4 * (e - 6) + (unsigned)(((need - 1) >> (e - 2)) & 3) + 1;
    /* the smallest class that fits, at most 25% slack, 16-byte multiples */
    ML_ASSERT(c < NSMALL && *size == class_size(c) && *size >= need && class_size(c - 1) < need);
    ML_ASSERT(*size - need < need / 4 && *size % 16 == 0);
    return c;
}

/* A small chunk of class c; *dirty says whether it held data before. Lock held. */
static uintptr_t small_get(unsigned c, size_t size, int *dirty)
{
    if (free_list[c]) {
        void *p = free_list[c];
        ML_ASSERT(chunk_ok((uintptr_t)p, size));
        free_list[c] = ((void **)p)[1];
        *dirty = 1;
        return (uintptr_t)p;
    }
    if (carve[c] + size > carve_end[c]) {
        uintptr_t pg = pages_get(SLAB / PAGE, 1); /* carved chunks count as fresh: zero */
        if (!pg)
            return 0;
        carve[c] = ml_range_base + pg * PAGE;
        carve_end[c] = carve[c] + SLAB;
    }
    uintptr_t chunk = carve[c];
    carve[c] += size;
    ML_ASSERT(carve[c] <= carve_end[c] && chunk_ok(chunk, size));
    *dirty = 0;
    return chunk;
}

/* The header zeroed by eleven 16-byte stores: memset of its 176 bytes compiled to `rep stos`, whose
 * start-up cost a tenth of a sample (~38 of ~360 TSC ticks for a sampled malloc and free, measured
 * at MEMLENS_INTERVAL=1 in runtime/bench/fastpath.c). */
typedef uint64_t ml_zero16 __attribute__((vector_size(16), aligned(8), may_alias));
_Static_assert(sizeof(struct ml_block) % sizeof(ml_zero16) == 0, "the header is whole 16-byte words");

static inline void clear_header(struct ml_block *b)
{
    ml_zero16 *w = (ml_zero16 *)b;
#pragma GCC unroll 16
    for (size_t i = 0; i < sizeof *b / sizeof *w; i++)
        w[i] = (ml_zero16){0, 0};
}

struct ml_block *ml_range_alloc_locked(size_t size, size_t align, int zero, int *dirty)
{
    if (align < 16)
        align = 16;
    if (size > (RANGE_SIZE >> 1) || align > (RANGE_SIZE >> 4))
        return NULL;
    size_t need = HDR + size + (align - 16), cap;
    uintptr_t chunk;
    unsigned c = LARGE;
    *dirty = 0;
    ML_ASSERT((align & (align - 1)) == 0); /* the callers round odd alignments up */
    ML_ASSERT(atomic_load(&lock));
    if (need <= SMALL_MAX) {
        c = small_class(need, &cap);
        chunk = small_get(c, cap, dirty);
    } else {
        uintptr_t n = (need + PAGE - 1) / PAGE, pg = pages_get(n, zero); /* cleared when zero */
        chunk = pg ? ml_range_base + pg * PAGE : 0;
        cap = n * PAGE;
    }
    ML_ASSERT(!chunk || (cap >= need && chunk_ok(chunk, cap)));
    if (!chunk)
        return NULL;
    uintptr_t user = (chunk + HDR + align - 1) & ~(uintptr_t)(align - 1);
    struct ml_block *b = (struct ml_block *)user - 1;
    clear_header(b);
    b->kind = ML_KIND_SAMPLED;
    b->cls = (uint16_t)c;
    b->size = size;
    b->off = user - chunk;
    b->cap = cap;
    live_add((int64_t)cap);
    if (retained > FLOOR)
        trim();
    ML_ASSERT(user % align == 0 && b->off >= HDR && b->off + size <= cap && ml_in_range((void *)user));
    return b;
}

int ml_range_fits(const struct ml_block *b, size_t size)
{
    ML_ASSERT(b->kind == ML_KIND_SAMPLED);
    size_t need = b->off + size;
    if (size > (RANGE_SIZE >> 1) || need > b->cap)
        return 0;
    /* a large block that shrank to less than half its pages gives the rest back (under the lock) */
    return b->cls != LARGE || (need + PAGE - 1) / PAGE >= b->cap / PAGE / 2;
}

/* Room for `size` bytes at b without moving it, by taking (or giving back) the pages that follow a
 * large chunk. Returns 1 and sets the block's size, or 0. */
int ml_range_resize_locked(struct ml_block *b, size_t size)
{
    if (b->kind != ML_KIND_SAMPLED || size > (RANGE_SIZE >> 1))
        return 0;
    size_t need = b->off + size;
    if (b->cls != LARGE) {
        ML_ASSERT(b->cls < NSMALL && b->cap == class_size(b->cls));
        if (need > b->cap)
            return 0;
        b->size = size;
        return 1;
    }
    uintptr_t chunk = (uintptr_t)(b + 1) - b->off, first = (chunk - ml_range_base) / PAGE;
    uintptr_t have = b->cap / PAGE, want = (need + PAGE - 1) / PAGE;
    int ok = 1;
    ML_ASSERT(atomic_load(&lock));
    ML_ASSERT(chunk % PAGE == 0 && b->cap % PAGE == 0 && chunk_ok(chunk, b->cap));
    if (want > have) {
        uintptr_t end = first + want;
        for (uintptr_t i = first + have; ok && i < end && i < hiwater; i++)
            ok = !(used[i / 64] & (1ull << (i % 64)));
        if (ok && end > hiwater) {
            ok = end <= limit / PAGE && commit(end * PAGE) == 0;
            if (ok)
                hiwater = end;
        }
        if (ok) {
            mark(first + have, want - have, 1);
            claim(first + have, want - have, 0); /* realloc leaves new bytes undefined */
        }
    } else if (want >= have / 2) {
        want = have; /* shrunk a lot (below half): the tail goes back, after the account below */
    }
    if (ok) {
        live_add((int64_t)(want * PAGE) - (int64_t)b->cap);
        b->cap = want * PAGE;
        b->size = size;
        if (want < have)
            pages_put(first + want, have - want);
        else if (want > have && retained > FLOOR)
            trim();
    }
    ML_ASSERT(b->off + b->size <= b->cap && chunk_ok(chunk, b->cap) && pages_ok());
    return ok;
}

void ml_range_free_locked(struct ml_block *b)
{
    unsigned c = b->cls;
    uintptr_t chunk = (uintptr_t)(b + 1) - b->off;
    ML_ASSERT(atomic_load(&lock));
    ML_ASSERT(b->kind == ML_KIND_SAMPLED && b->off >= HDR && b->off + b->size <= b->cap);
    b->kind = 0; /* a second free of the same pointer is then ignored rather than corrupting the list */
    live_add(-(int64_t)b->cap);
    ML_ASSERT(c == LARGE ? chunk % PAGE == 0 && b->cap % PAGE == 0 : c < NSMALL && b->cap == class_size(c));
    ML_ASSERT(chunk_ok(chunk, b->cap) && (c == LARGE || chunk != (uintptr_t)free_list[c]));
    if (c == LARGE) {
        pages_put((chunk - ml_range_base) / PAGE, b->cap / PAGE);
    } else {
        ((void **)chunk)[1] = free_list[c]; /* [1]: keep the header's kind word intact */
        free_list[c] = (void *)chunk;
    }
}
