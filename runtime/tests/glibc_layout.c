/* What glibc's heap holds after a fixed pattern of malloc, realloc, aligned allocations and frees:
 * its in-use bytes and the size of the heap it took from the system (mallinfo2), after the pattern
 * and again after everything is freed. Under memlens these must read as they do bare: a sampled
 * block served from memlens's range leaves a hole in glibc's heap unless its placeholder takes
 * the block's place there (intercept/source.c). The pattern is seeded, the same on every run. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define N 20000

static uint64_t seed = 0x9E3779B97F4A7C15ull;

static size_t draw(size_t lo, size_t span)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return lo + seed % span;
}

static void say(const char *when)
{
    struct mallinfo2 m = mallinfo2();
    printf("%s inuse %zu arena %zu\n", when, m.uordblks, m.arena);
}

int main(void)
{
    static void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = malloc(draw(16, 4000));
    for (int i = 1; i < N; i += 2)
        free(p[i]);
    for (int i = 1; i < N; i += 2)
        p[i] = i % 6 == 1 ? calloc(1, draw(16, 9000)) : malloc(draw(16, 3000));
    for (int i = 0; i < N; i += 3)
        p[i] = realloc(p[i], draw(16, 12000));
    for (int i = 5; i < N; i += 10) {
        free(p[i]);
        if (posix_memalign(&p[i], 64, draw(64, 2000)))
            p[i] = NULL;
    }
    for (int i = 0; i < N; i += 4) /* a few large ones, from the heap and mapped */
        if (i % 400 == 0)
            p[i] = realloc(p[i], draw(64 << 10, 256 << 10));
    say("held");
    for (int i = 0; i < N; i++)
        free(p[i]);
    say("freed");
    return 0;
}
