/* The library attach_target.c dlopens after memlens has attached: its allocations must be sampled
 * (the runtime patches modules loaded after attach) and named in the profile. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) unsigned long late_alloc_work(unsigned round)
{
    unsigned long sum = 0;
    for (int i = 0; i < 64; i++) {
        size_t n = 2048 + (size_t)((round * 64 + (unsigned)i) % 7) * 512;
        unsigned char *p = malloc(n);
        memset(p, (int)(i + round) & 0xff, n);
        sum += p[n - 1] + n;
        p = realloc(p, n * 2);
        sum += p[0];
        free(p);
    }
    return sum;
}
