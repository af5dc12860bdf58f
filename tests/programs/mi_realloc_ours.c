/* Blocks from malloc handed to mimalloc's own reallocating entry points (tests/e2e/allocators.rs),
 * in a program linked with the shared libmimalloc: its malloc is the one memlens interposes, so a
 * sampled block lives in memlens's range and mi_realloc / mi_heap_realloc must not reach mimalloc
 * with it (it finds no size there and copies nothing). Prints the sum of a byte each block kept. */
#include <mimalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 2000

int main(void)
{
    size_t kept = 0;
    for (int i = 0; i < N; i++) {
        char *p = malloc(1000);
        memset(p, 1, 1000);
        p = i & 1 ? mi_realloc(p, 5000) : mi_heap_realloc(mi_heap_get_default(), p, 5000);
        kept += (size_t)p[999];
        free(p);
    }
    printf("kept=%zu of %d\n", kept, N);
    return 0;
}
