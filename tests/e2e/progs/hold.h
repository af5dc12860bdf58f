/* Holds n malloc blocks of `size` bytes, touched (the mmap test programs' heap: mmap_heap.c,
 * mmap_timeline.c). Included once per program. */
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) void **hold(size_t n, size_t size)
{
    void **v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[i] = malloc(size);
        memset(v[i], 1, size);
    }
    return v;
}
