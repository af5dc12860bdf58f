/* mimalloc's first-class heaps at three known sites (tests/e2e/allocators.rs), built with mimalloc's
 * sources linked statically:
 *   `keep`   allocates N blocks in a heap of its own (mi_heap_malloc, _zalloc, _calloc, _realloc,
 *            _malloc_aligned, _calloc_aligned) that stays to the end;
 *   `doomed` allocates as much in a heap that main then mi_heap_destroy's: every block freed
 *            without a free per block (none of it is in use at the end; all of it was allocated);
 *   `moved`  allocates as much in a heap that main mi_heap_delete's: its blocks move to the
 *            backing heap and stay in use;
 *   `spared` allocates as much in a heap made without allow_destroy (mi_heap_new_ex(0, false,
 *            0)) that main then mi_heap_destroy's: mimalloc only deletes such a heap, so its
 *            blocks stay in use (in the backing heap);
 *   `dups`   holds as much in strings made by mi_heap_strdup, mi_heap_strndup, mi_strdup and
 *            mi_strndup (in the kept heap and the default one);
 *   `paths`  holds the strings of mi_heap_realpath and mi_realpath of a long path (argv[0]'s
 *            directory with long names below it, made here).
 * It prints its own count of what each holds and mimalloc's own count of the kept heap's bytes
 * (mi_heap_visit_blocks over it) and of what the backing heap gained by the destroy of `spared`'s
 * heap (from the run without memlens: a sampled block lives in memlens's range, where mimalloc does
 * not see it). With two file arguments it runs the sites again once the first exists (memlens
 * attach comes in meanwhile). */
#include <limits.h>
#include <mimalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N 8192
#define SIZE 4096
#define NPATHS 16384

static void *kept[N], *left[N], *spare[N], *dupd[N], *paths_[NPATHS];
static char text[SIZE];         /* SIZE - 1 characters: each copy is SIZE bytes */
static char longpath[PATH_MAX]; /* a directory, its real path long (mkdir_long) */
static size_t path_bytes;       /* what one real path of it takes: strlen + 1 */

__attribute__((noinline)) static void keep(mi_heap_t *h)
{
    for (int i = 0; i < N; i++) {
        switch (i % 6) {
        case 0: kept[i] = mi_heap_malloc(h, SIZE); break;
        case 1: kept[i] = mi_heap_zalloc(h, SIZE); break;
        case 2: kept[i] = mi_heap_calloc(h, SIZE / 64, 64); break;
        case 3: kept[i] = mi_heap_realloc(h, mi_heap_malloc(h, SIZE / 2), SIZE); break;
        case 4: kept[i] = mi_heap_malloc_aligned(h, SIZE, 64); break;
        default: kept[i] = mi_heap_calloc_aligned(h, SIZE / 64, 64, 64); break;
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

__attribute__((noinline)) static void spared(mi_heap_t *h)
{
    for (int i = 0; i < N; i++) {
        spare[i] = mi_heap_malloc(h, SIZE);
        memset(spare[i], 4, 64);
    }
}

/* Strings of SIZE bytes, a quarter through each of the four. */
__attribute__((noinline)) static void dups(mi_heap_t *h)
{
    for (int i = 0; i < N; i++) {
        switch (i % 4) {
        case 0: dupd[i] = mi_heap_strdup(h, text); break;
        case 1: dupd[i] = mi_heap_strndup(h, text, 2 * SIZE); break;
        case 2: dupd[i] = mi_strdup(text); break;
        default: dupd[i] = mi_strndup(text, SIZE - 1); break;
        }
    }
}

__attribute__((noinline)) static void paths(mi_heap_t *h)
{
    for (int i = 0; i < NPATHS; i++)
        paths_[i] = i % 2 ? mi_heap_realpath(h, longpath, NULL) : mi_realpath(longpath, NULL);
}

/* A directory with a long real path: three levels of 200-character names under `base`. */
static void mkdir_long(const char *base)
{
    char name[201];
    memset(name, 'd', 200), name[200] = 0;
    snprintf(longpath, sizeof longpath, "%s", base);
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(longpath);
        snprintf(longpath + l, sizeof longpath - l, "/%s", name);
        mkdir(longpath, 0700);
    }
    char *r = realpath(longpath, NULL);
    path_bytes = strlen(r) + 1;
    free(r);
}

static bool add_block(const mi_heap_t *h, const mi_heap_area_t *a, void *block, size_t size, void *arg)
{
    (void)h, (void)a;
    if (block)
        *(size_t *)arg += size;
    return true;
}

static size_t heap_bytes(const mi_heap_t *h)
{
    size_t visited = 0;
    mi_heap_visit_blocks(h, true, add_block, &visited);
    return visited;
}

/* The sites, each heap new; returns mimalloc's count of the kept heap's bytes (before `dups` puts
 * strings there), and in *gained what the backing heap gained when `spared`'s heap was destroyed. */
static size_t sites(mi_heap_t **hk, long *gained)
{
    mi_heap_t *hd = mi_heap_new(), *hm = mi_heap_new(), *hs = mi_heap_new_ex(0, false, 0);
    *hk = mi_heap_new();
    keep(*hk);
    doomed(hd);
    mi_heap_destroy(hd);
    moved(hm);
    mi_heap_delete(hm);
    spared(hs);
    long before = (long)heap_bytes(mi_heap_get_backing());
    mi_heap_destroy(hs); /* only deleted: its blocks go to the backing heap */
    *gained = (long)heap_bytes(mi_heap_get_backing()) - before;
    for (int i = 0; i < N; i++)
        memset(spare[i], 5, SIZE); /* still ours */
    size_t visited = heap_bytes(*hk);
    dups(*hk);
    paths(*hk);
    return visited;
}

/* What `spared`, `dups` and `paths` hold goes back (before the kept heap is destroyed). */
static void let_go(void)
{
    for (int i = 0; i < N; i++)
        mi_free(spare[i]), mi_free(dupd[i]);
    for (int i = 0; i < NPATHS; i++)
        mi_free(paths_[i]);
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
    memset(text, 't', SIZE - 1);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", argv[0]);
    *strrchr(dir, '/') = 0;
    mkdir_long(dir);
    mi_heap_t *hk;
    long gained;
    size_t visited = sites(&hk, &gained);
    printf("held_bytes=%zu allocator=mi_heap_visit_blocks allocator_before=0 allocator_after=%zu "
           "moved_bytes=%zu doomed_bytes=%zu spared_bytes=%zu spared_allocator=%ld dups_bytes=%zu "
           "paths_bytes=%zu\n",
           (size_t)N * SIZE, visited, (size_t)N * SIZE, (size_t)N * SIZE, (size_t)N * SIZE, gained,
           (size_t)N * SIZE, NPATHS * path_bytes);
    fflush(stdout);
    if (argc > 2) {
        wait_for(argv[1]);
        let_go();
        mi_heap_destroy(hk); /* its blocks were not sampled: none of memlens's to free */
        for (int i = 0; i < N; i++)
            mi_free(left[i]); /* the deleted heap's blocks, now the backing heap's */
        visited = sites(&hk, &gained);
        printf("again held_bytes=%zu allocator_after=%zu\n", (size_t)N * SIZE, visited);
        fflush(stdout);
        wait_for(argv[2]);
    }
    return 0; /* the profile at exit: what keep, moved, spared, dups and paths hold is in use */
}
