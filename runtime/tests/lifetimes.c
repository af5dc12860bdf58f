/* Two sites whose blocks live known times: long_site's for about 1.4 s, short_site's for about
 * 300 ms (1 MiB blocks: sampled with probability near 1 at the default interval). Their lifetimes
 * must be reported as what was measured: long_site in the 1 s-10 s decade, short_site in 100 ms-1 s,
 * and nothing of short_site as freed after 1 s. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory") /* the compiler may not drop the block */

static void nap(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void *blocks[8];

static __attribute__((noinline)) void long_site(void)
{
    for (int i = 0; i < 8; i++) {
        blocks[i] = malloc(1 << 20);
        memset(blocks[i], 1, 1 << 20);
    }
}

static __attribute__((noinline)) void short_site(void)
{
    for (int i = 0; i < 8; i++) {
        void *p = malloc(1 << 20);
        memset(p, 2, 1 << 20);
        KEEP(p);
        nap(300);
        free(p);
    }
}

int main(void)
{
    long_site();
    nap(1400);
    for (int i = 0; i < 8; i++)
        free(blocks[i]);
    short_site();
    return 0;
}
