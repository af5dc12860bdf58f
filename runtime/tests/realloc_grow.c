/* Grows one buffer by 64 KiB steps to 64 MiB with realloc, writing each new step, then frees it.
 * Prints "grown <bytes> <checksum>" and its peak RSS in KiB (getrusage). The profile must show the
 * buffer (sampled: at 64 MiB it cannot escape sampling) without the runtime copying it each step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static __attribute__((noinline)) char *grow(char *p, size_t n) { return realloc(p, n); }

int main(int argc, char **argv)
{
    size_t step = 64 << 10, max = (argc > 1 ? strtoull(argv[1], NULL, 0) : 64) << 20;
    char *p = NULL;
    unsigned long sum = 0;
    for (size_t n = step; n <= max; n += step) {
        p = grow(p, n);
        if (!p)
            return 1;
        memset(p + n - step, (int)(n / step), step);
    }
    for (size_t i = 0; i < max; i += 4096)
        sum += (unsigned char)p[i];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("grown %zu %lu\nmaxrss_kib %ld\n", max, sum, ru.ru_maxrss);
    if (getenv("KEEP"))
        return 0; /* leave it live for the profile's inuse view */
    free(p);
    return 0;
}
