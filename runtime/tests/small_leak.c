/* A leak of known size and nothing else live at exit: `n` blocks of `size` bytes (default 40 x 1 KiB)
 * never freed, among as many freed. Prints `leaked <bytes>`. At 512 KiB it is far below what the
 * sampling resolves; at 1 KiB it is about 40 samples. Arguments: [n] [size]. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 0) : 40;
    size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 1024;
    static volatile char *sink;
    for (size_t i = 0; i < 2 * n; i++) {
        char *p = malloc(size);
        if (!p)
            return 1;
        p[0] = (char)i;
        if (i % 2)
            free(p);
        else
            sink = p; /* leaked */
    }
    printf("leaked %zu\n", n * size);
    fflush(stdout);
    return sink == NULL;
}
