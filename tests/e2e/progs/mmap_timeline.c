/* Keeps a 64 MiB anonymous mapping beside 32 MiB of heap in 64 KiB malloc blocks, then allocates
 * and frees small blocks for a while, so that the sampled path takes timeline points while both are
 * held (tests/e2e/mmap.rs: the timeline shows the mapping apart from the heap). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "hold.h"
__attribute__((noinline)) void *keep_mapping(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 1, n);
    return p;
}
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}
int main(void)
{
    void *m = keep_mapping(64u << 20);
    void **v = hold(512, 64 << 10);
    /* a pause without frees, in which the runtime's thread reads malloc's figures (during the churn
     * below it skips them: a heap freeing that much may be slow to walk) */
    usleep(300000);
    /* churn (freed at once: the live heap stays the 32 MiB) for ~400 ms: periodic points */
    char *volatile sink;
    for (double t0 = now(); now() - t0 < 0.4;)
        for (int i = 0; i < 1000; i++) {
            char *p = malloc(4096);
            p[0] = 1;
            sink = p;
            free(p);
        }
    (void)sink;
    printf("heap_bytes=%zu mmap_bytes=%zu %p %p\n", (size_t)512 * (64 << 10), (size_t)64 << 20, m, (void *)v);
    fflush(stdout);
    return 0;
}
