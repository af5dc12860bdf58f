/* mimalloc's first-class heaps at three known sites (tests/e2e/allocators.rs), built with mimalloc's
 * sources linked statically:
 *   `keep`   allocates N blocks in a heap of its own (mi_heap_malloc, _zalloc, _calloc, _realloc,
 *            _malloc_aligned) that stays to the end;
 *   `doomed` allocates as much in a heap that main then mi_heap_destroy's: every block freed
 *            without a free per block (none of it is in use at the end; all of it was allocated);
 *   `moved`  allocates as much in a heap that main mi_heap_delete's: its blocks move to the
 *            backing heap and stay in use.
 * It prints its own count of what `keep` and `moved` hold and mimalloc's own count of the kept
 * heap's bytes (mi_heap_visit_blocks over it, from the run without memlens: a sampled block lives
 * in memlens's range, where mimalloc does not see it). With two file arguments it runs the sites
 * again once the first exists (memlens attach comes in meanwhile). */
#include <mimalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define N 8192
#define SIZE 4096

static void *kept[N], *left[N];

__attribute__((noinline)) static void keep(mi_heap_t *h)
{
    for (int i = 0; i < N; i++) {
        switch (i % 5) {
        case 0: kept[i] = mi_heap_malloc(h, SIZE); break;
        case 1: kept[i] = mi_heap_zalloc(h, SIZE); break;
        case 2: kept[i] = mi_heap_calloc(h, SIZE / 64, 64); break;
        case 3: kept[i] = mi_heap_realloc(h, mi_heap_malloc(h, SIZE / 2), SIZE); break;
        default: kept[i] = mi_heap_malloc_aligned(h, SIZE, 64); break;
        }
        memset(kept[i], 1, 64);
    }
}

__attribute__((noinline)) static void doomed(mi_heap_t *h)
{
    for (int i = 0; i < N; i++)
        memset(mi_heap_malloc(h, SIZE), 2, 64);
}

__attribute__((noinline)) static void moved(mi_heap_t *h)
{
    for (int i = 0; i < N; i++) {
        left[i] = mi_heap_malloc(h, SIZE);
        memset(left[i], 3, 64);
    }
}

static bool add_block(const mi_heap_t *h, const mi_heap_area_t *a, void *block, size_t size, void *arg)
{
    (void)h, (void)a;
    if (block)
        *(size_t *)arg += size;
    return true;
}

/* The three sites, each heap new; returns mimalloc's count of the kept heap's bytes. */
static size_t sites(mi_heap_t **hk)
{
    mi_heap_t *hd = mi_heap_new(), *hm = mi_heap_new();
    *hk = mi_heap_new();
    keep(*hk);
    doomed(hd);
    mi_heap_destroy(hd);
    moved(hm);
    mi_heap_delete(hm);
    size_t visited = 0;
    mi_heap_visit_blocks(*hk, true, add_block, &visited);
    return visited;
}

static void wait_for(const char *path)
{
    while (access(path, F_OK) != 0)
        usleep(10000);
}

/* With two paths (memlens attach): after the first round it waits for the first file, then its
 * kept heap is destroyed and the sites run again (now profiled), and it waits for the second. */
int main(int argc, char **argv)
{
    mi_heap_t *hk;
    size_t visited = sites(&hk);
    printf("held_bytes=%zu allocator=mi_heap_visit_blocks allocator_before=0 allocator_after=%zu "
           "moved_bytes=%zu doomed_bytes=%zu\n",
           (size_t)N * SIZE, visited, (size_t)N * SIZE, (size_t)N * SIZE);
    fflush(stdout);
    if (argc > 2) {
        wait_for(argv[1]);
        mi_heap_destroy(hk); /* its blocks were not sampled: none of memlens's to free */
        for (int i = 0; i < N; i++)
            mi_free(left[i]); /* the deleted heap's blocks, now the backing heap's */
        visited = sites(&hk);
        printf("again held_bytes=%zu allocator_after=%zu\n", (size_t)N * SIZE, visited);
        fflush(stdout);
        wait_for(argv[2]);
    }
    return 0; /* the profile at exit: what keep and moved hold is still in use */
}
