/* A heap that churns at a steady size, for the peak estimator (issue 34): 200 blocks of 32 KiB are
 * kept and replaced one at a time (free, then malloc) 400,000 times, so the live heap never exceeds
 * 200 x 32 KiB = 6.25 MiB, reached at the start and after every replacement. The highest of the
 * sampled estimate's thousands of moments reads about twice that at 512 KiB; the split-sample
 * estimate must not. Prints `true_peak <bytes>`. Arguments: [blocks] [size] [replacements]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 0) : 200;
    size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 32768;
    size_t reps = argc > 3 ? strtoul(argv[3], NULL, 0) : 400000;
    char **keep = calloc(n, sizeof *keep); /* 1.6 kB: below what any interval resolves */
    if (!keep)
        return 1;
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        if (!keep[i])
            return 1;
        keep[i][0] = (char)i;
    }
    for (size_t r = 0; r < reps; r++) {
        size_t i = r % n;
        free(keep[i]);
        keep[i] = malloc(size);
        if (!keep[i])
            return 1;
        keep[i][0] = (char)r; /* touched: the compiler keeps the pair */
    }
    for (size_t i = 0; i < n; i++)
        free(keep[i]);
    free(keep);
    printf("true_peak %zu\n", n * size + n * sizeof *keep);
    return 0;
}
