/* Two call sites in one function, kept apart (as `go tool pprof -lines` and heaptrack list them): a
 * big leak of 20 MiB on one line of main and a small one of 2 MiB on another (blocks of 2 MiB and
 * more: sampled with probability near 1, so the sizes shown are close to exact). Views that merge
 * stacks by function name would show one row for main, labelled with one of the two lines.
 * Prints `big_line <n>` and `small_line <n>`: the lines of the two calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *keep[8];

int main(void)
{
    for (int i = 0; i < 5; i++) {
        keep[i] = malloc(4 << 20); int big_line = __LINE__;
        memset(keep[i], 1, 4 << 20);
        if (i == 0)
            printf("big_line %d\n", big_line);
    }
    keep[5] = malloc(2 << 20); int small_line = __LINE__;
    memset(keep[5], 2, 2 << 20);
    printf("small_line %d\n", small_line);
    return 0;
}
