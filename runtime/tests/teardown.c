/* A program that builds a heap of many small blocks and then tears it down, the way perl destroys
 * its hashes at exit (issue 29, item 1): glibc is left with hundreds of thousands of free chunks,
 * and one mallinfo2 walk over them holds the arena's lock for tens of ms. The runtime must not read
 * the allocator's figures then.
 *   teardown [BLOCKS]   (default 600000): allocates BLOCKS blocks of 40 bytes, keeps them 400 ms,
 *   frees every other one (so that glibc cannot merge them), keeps the rest 400 ms, and prints the
 *   number of blocks it freed. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts))
        ;
}

/* Sleep `ms` in steps while allocating a little, so the program keeps taking timeline points (the
 * runtime reads the allocator's figures only while the program samples). */
static void hold(long ms)
{
    for (long t = 0; t < ms; t += 10) {
        free(malloc(64 << 10)); /* sampled now and then at 512K: points keep coming */
        pause_ms(10);
    }
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 600000;
    void **b = malloc((size_t)n * sizeof *b);
    if (!b)
        return 1;
    for (long i = 0; i < n; i++)
        b[i] = malloc(40);
    hold(400);
    long freed = 0;
    for (long i = 0; i < n; i += 2, freed++)
        free(b[i]);
    hold(400);
    printf("%ld\n", freed);
    return 0;
}
