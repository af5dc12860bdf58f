// The program `memlens check`'s tests gate: it builds a table of small records (its peak), keeps
// a registry of some of them to the end (its leak at exit), frees the rest, and in its "regressed"
// version also leaks a cache that grows with the input (the regression a baseline must catch).
//
//   check_leaker THOUSANDS KEEP LEAK_CACHE EXIT_CODE [BIG_MIB]
//
// THOUSANDS: records in the table (each 160..256 bytes, 208 on average); the first 1/KEEP of them
// stay live to the end; LEAK_CACHE 1 adds one cache entry (160..256 bytes) per two records, never
// freed; BIG_MIB keeps one block of that many MiB to the end. It prints its own exact figures:
// `peak BYTES`, `leak BYTES` (the bytes it asked for; stdio's buffer is not among them).
//
// Records are above glibc's fastbin sizes and freed in one run, so that what is freed coalesces
// into a few free chunks: the runtime's timeline calls mallinfo2() on the program's thread, which
// walks every free chunk (with 300 000 records of 48..144 bytes in fastbins, 27 ms of CPU a point,
// a point every 100 ms: on a loaded machine the program did little else for minutes). A runtime
// bug (docs/check.md), not what these tests are about.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rec {
    struct rec *next;
    char name[152];
};

static struct rec *cache;
static size_t live, peak;

static void *take(size_t n) {
    void *p = malloc(n);
    if (!p) {
        perror("malloc");
        exit(2);
    }
    memset(p, 1, n); // touched: the compiler may not elide it
    live += n;
    if (live > peak)
        peak = live;
    return p;
}

__attribute__((noinline)) static void cache_insert_leaky(int i) {
    size_t n = sizeof(struct rec) + (size_t)(i % 7) * 16; /* 160..256 */
    struct rec *r = take(n);
    r->next = cache;
    cache = r;
}

__attribute__((noinline)) static struct rec **build_table(int n, size_t *sizes) {
    struct rec **t = take((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        sizes[i] = sizeof(struct rec) + (size_t)(i % 7) * 16;
        t[i] = take(sizes[i]);
        snprintf(t[i]->name, sizeof t[i]->name, "record %d", i);
    }
    return t;
}

__attribute__((noinline)) static void drop_all_but_registry(struct rec **t, size_t *sizes, int n,
                                                           int keep) {
    for (int i = keep > 0 ? n / keep : 0; i < n; i++) { // the first n/keep: the registry
        live -= sizes[i];
        free(t[i]);
    }
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: check_leaker THOUSANDS KEEP_EVERY LEAK_CACHE EXIT_CODE [BIG_MIB]\n");
        return 2;
    }
    if (argc == 6)
        take((size_t)atoi(argv[5]) << 20);
    int n = atoi(argv[1]) * 1000, keep = atoi(argv[2]), leak = atoi(argv[3]);
    size_t *sizes = take((size_t)n * sizeof *sizes);
    struct rec **t = build_table(n, sizes);
    drop_all_but_registry(t, sizes, n, keep);
    if (leak)
        for (int i = 0; i < n / 2; i++)
            cache_insert_leaky(i);
    printf("peak %zu\nleak %zu\n", peak, live);
    return atoi(argv[4]);
}
