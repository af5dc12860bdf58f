/* Blocks memlens sampled (tests/e2e/allocators.rs: a small interval, so that every block is)
 * handed to mimalloc's reallocating entry points that ask for an offset alignment
 * (`mi_realloc_aligned_at` & co.: (q + offset) % align == 0) or for an aligned, zeroed array
 * (`mi_recalloc_aligned`), in a program with mimalloc's sources linked statically. None of them
 * may reach mimalloc with a block of memlens's range (it would read a size and a heap where there
 * are none). Each result must keep the block's bytes, be aligned as asked, and be zeroed beyond
 * them where the entry point zeroes. Prints how many did. */
#include <mimalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define N 4000
#define OLD 1000
#define NEW 5000
#define ALIGN 64
#define OFFSET 16

/* Block i reallocated to NEW bytes through the entry point i % 8; *off: the offset it aligns. */
static char *grow(char *p, int i, size_t *off, int *zeroes)
{
    mi_heap_t *h = mi_heap_get_default();
    *off = OFFSET, *zeroes = 1;
    switch (i % 8) {
    case 0: return *zeroes = 0, mi_realloc_aligned_at(p, NEW, ALIGN, OFFSET);
    case 1: return mi_rezalloc_aligned_at(p, NEW, ALIGN, OFFSET);
    case 2: return mi_recalloc_aligned_at(p, NEW / 8, 8, ALIGN, OFFSET);
    case 3: return *zeroes = 0, mi_heap_realloc_aligned_at(h, p, NEW, ALIGN, OFFSET);
    case 4: return mi_heap_rezalloc_aligned_at(h, p, NEW, ALIGN, OFFSET);
    case 5: return mi_heap_recalloc_aligned_at(h, p, NEW / 8, 8, ALIGN, OFFSET);
    case 6: return *off = 0, mi_recalloc_aligned(p, NEW / 8, 8, ALIGN);
    default: return *off = 0, mi_heap_recalloc_aligned(h, p, NEW / 8, 8, ALIGN);
    }
}

int main(void)
{
    int kept = 0;
    for (int i = 0; i < N; i++) {
        /* recalloc's old size is what it was asked for: an array of the same element size */
        char *p = i % 8 == 2 || i % 8 >= 5 ? mi_calloc(OLD / 8, 8) : mi_malloc(OLD);
        memset(p, 1, OLD);
        size_t off;
        int zeroes;
        char *q = grow(p, i, &off, &zeroes);
        int ok = q && q[0] == 1 && q[OLD - 1] == 1 && ((uintptr_t)q + off) % ALIGN == 0;
        if (ok && zeroes)
            ok = q[OLD] == 0 && q[NEW - 1] == 0;
        kept += ok;
        memset(q, 2, NEW);
        mi_free(q);
    }
    printf("kept=%d of %d\n", kept, N);
    return 0;
}
