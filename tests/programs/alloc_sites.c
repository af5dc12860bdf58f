/* A program of two known allocation sites, built against each allocator linked statically
 * (tests/e2e/allocators.rs): `hold` keeps HOLD_N blocks of HOLD_SIZE bytes live to the end, `churn`
 * allocates and frees CHURN_N blocks of varied size on THREADS threads. It prints its own count of the
 * bytes `hold` keeps and the allocator's own statistics of what is allocated, then (with a path
 * argument) waits until that file exists before it exits, so `memlens attach` can come in first.
 *
 * Built with -DUSE_JEMALLOC (mallctl "stats.allocated"), -DUSE_TCMALLOC
 * ("generic.current_allocated_bytes") or -DUSE_MIMALLOC (mi_process_info's committed bytes: a
 * release mimalloc keeps no byte count of its own). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOLD_N 8192
#define HOLD_SIZE 4096
#define CHURN_N 200000
#define THREADS 2

#if defined(USE_JEMALLOC)
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
static const char *which = "jemalloc stats.allocated";
static size_t allocator_bytes(void)
{
    uint64_t epoch = 1;
    size_t n = sizeof epoch, v = 0, vn = sizeof v;
    mallctl("epoch", &epoch, &n, &epoch, n);
    mallctl("stats.allocated", &v, &vn, NULL, 0);
    return v;
}
#elif defined(USE_TCMALLOC)
int MallocExtension_GetNumericProperty(const char *property, size_t *value);
static const char *which = "tcmalloc generic.current_allocated_bytes";
static size_t allocator_bytes(void)
{
    size_t v = 0;
    MallocExtension_GetNumericProperty("generic.current_allocated_bytes", &v);
    return v;
}
#elif defined(USE_MIMALLOC)
void mi_process_info(size_t *elapsed_msecs, size_t *user_msecs, size_t *system_msecs, size_t *current_rss,
                     size_t *peak_rss, size_t *current_commit, size_t *peak_commit, size_t *page_faults);
static const char *which = "mimalloc current_commit";
static size_t allocator_bytes(void)
{
    size_t e, u, s, rss, prss, commit = 0, pcommit, pf;
    mi_process_info(&e, &u, &s, &rss, &prss, &commit, &pcommit, &pf);
    return commit;
}
#else
static const char *which = "none";
static size_t allocator_bytes(void) { return 0; }
#endif

static void *held[HOLD_N];

__attribute__((noinline)) static void hold(void)
{
    for (int i = 0; i < HOLD_N; i++) {
        held[i] = malloc(HOLD_SIZE);
        memset(held[i], 1, 64);
    }
}

__attribute__((noinline)) static void *churn(void *arg)
{
    uintptr_t seed = (uintptr_t)arg * 2654435761u + 1;
    for (int i = 0; i < CHURN_N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 16 + (seed >> 33) % 2048;
        char *p = i % 3 == 0 ? calloc(1, n) : malloc(n);
        p[0] = 1;
        if (i % 5 == 0)
            p = realloc(p, n * 2);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    size_t before = allocator_bytes();
    hold();
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, churn, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    size_t after = allocator_bytes();
    printf("held_bytes=%zu allocator=%s allocator_before=%zu allocator_after=%zu\n",
           (size_t)HOLD_N * HOLD_SIZE, which, before, after);
    fflush(stdout);
    if (argc > 1) {
        while (access(argv[1], F_OK) != 0) {
            usleep(10000);
            /* keep allocating while waiting, so an attached memlens samples hold's kin too */
            free(malloc(100));
        }
        /* after the attach: the same sites again, now profiled */
        for (int i = 0; i < HOLD_N; i++)
            free(held[i]);
        hold();
        churn((void *)7);
        printf("again held_bytes=%zu allocator_after=%zu\n", (size_t)HOLD_N * HOLD_SIZE, allocator_bytes());
        fflush(stdout);
        if (argc > 2)
            while (access(argv[2], F_OK) != 0)
                usleep(10000);
    }
    return 0;
}
