/* A library loaded with dlopen after start, with jemalloc linked into it (tests/e2e/allocators.rs):
 * built twice from this file. As the library (-DLIB, linked with libjemalloc_pic.a, whose symbols
 * it keeps to itself) its `hold` keeps HOLD_N blocks of HOLD_SIZE bytes through jemalloc's own
 * malloc, and `allocated` reads jemalloc's "stats.allocated". As the program it dlopens the library
 * given as argv[1] (RTLD_LOCAL), calls `hold` and prints its own count and jemalloc's, as
 * alloc_sites.c does; with a second argument it then waits until that file exists. With a third, it
 * first prints where the loader's notification is (r_debug.r_brk) and waits until that file exists
 * before it loads the library (memlens attach comes in meanwhile: tests/e2e/allocators_attach.rs). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOLD_N 8192
#define HOLD_SIZE 4096

#ifdef LIB
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static void *held[HOLD_N];

__attribute__((noinline)) void hold(void)
{
    for (int i = 0; i < HOLD_N; i++) {
        held[i] = malloc(HOLD_SIZE);
        memset(held[i], 1, 64);
    }
    for (int i = 0; i < 100000; i++) /* churn, freed at once */
        free(malloc(16 + (size_t)i % 1000));
}

size_t allocated(void)
{
    uint64_t epoch = 1;
    size_t n = sizeof epoch, v = 0, vn = sizeof v;
    mallctl("epoch", &epoch, &n, &epoch, n);
    mallctl("stats.allocated", &v, &vn, NULL, 0);
    return v;
}
#else
#include <dlfcn.h>
#include <link.h>

int main(int argc, char **argv)
{
    if (argc > 3) {
        /* Through dlsym: a reference to _r_debug in the program would copy it into the program at
         * start (a copy relocation), where the loader never updates it, and every module reading
         * _r_debug, the runtime too, would see that stale copy. */
        const struct r_debug *r = dlsym(RTLD_DEFAULT, "_r_debug");
        printf("waiting brk=%p\n", r ? (void *)r->r_brk : NULL);
        fflush(stdout);
        while (access(argv[3], F_OK) != 0)
            usleep(10000);
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    void (*hold)(void) = (void (*)(void))dlsym(h, "hold");
    size_t (*allocated)(void) = (size_t(*)(void))dlsym(h, "allocated");
    size_t before = allocated();
    hold();
    size_t after = allocated();
    printf("held_bytes=%zu allocator=jemalloc-in-a-dlopened-library allocator_before=%zu allocator_after=%zu\n",
           (size_t)HOLD_N * HOLD_SIZE, before, after);
    fflush(stdout);
    if (argc > 2)
        while (access(argv[2], F_OK) != 0)
            usleep(10000);
    return 0;
}
#endif
