/* Keeps 96 MiB in 64 KiB malloc blocks (tests/e2e/mmap.rs): run with an allocator preloaded
 * (jemalloc, tcmalloc, mimalloc), whose arenas come from mmap, the profile must count the blocks
 * once, as heap, and none of the arenas as anonymous mmap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hold.h"
int main(void)
{
    void **v = hold(1536, 64 << 10);
    printf("held_bytes=%zu %p\n", (size_t)1536 * (64 << 10), (void *)v);
    fflush(stdout);
    return 0;
}
