/* A brief spike over a churning heap (issue 34: git pack-objects' peak, 11 ms of an 11 s run above
 * 1.5 MB, to 2.02 MB over a plateau of 1.3 MB). `n` blocks of `size` bytes are kept and replaced one
 * at a time `reps` times; halfway, `m` blocks of `small` bytes are allocated, touched and freed at
 * once: the exact peak is n x size + m x small (and the arrays), held for a moment. At 512 KiB the
 * spike is not told from the plateau's sampling noise: a half-sample's highest moment lies on the
 * plateau nearly always. Prints `true_peak <bytes>`. Arguments: [n] [size] [reps] [m] [small]. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 0) : 100;
    size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 65536;
    size_t reps = argc > 3 ? strtoul(argv[3], NULL, 0) : 300000;
    size_t m = argc > 4 ? strtoul(argv[4], NULL, 0) : 1600;
    size_t small = argc > 5 ? strtoul(argv[5], NULL, 0) : 4096;
    char **keep = calloc(n, sizeof *keep), **spike = calloc(m, sizeof *spike);
    if (!keep || !spike)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (!(keep[i] = malloc(size)))
            return 1;
    for (size_t r = 0; r < reps; r++) {
        size_t i = r % n;
        free(keep[i]);
        if (!(keep[i] = malloc(size)))
            return 1;
        keep[i][0] = (char)r; /* touched: the compiler keeps the pair */
        if (r == reps / 2) {
            for (size_t j = 0; j < m; j++) {
                if (!(spike[j] = malloc(small)))
                    return 1;
                spike[j][0] = (char)j;
            }
            for (size_t j = 0; j < m; j++)
                free(spike[j]);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(keep[i]);
    free(keep);
    free(spike);
    printf("true_peak %zu\n", n * size + m * small + (n + m) * sizeof(char *));
    return 0;
}
