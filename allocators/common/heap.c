/* One heap: segregated free lists behind one lock, refilled from mmap'd chunks.
 * Memory given to a heap is never returned to the system; freed blocks are reused by their class. */
#include "ml_alloc.h"

#include <sys/mman.h>

struct ml_heap ml_heaps[ML_MAX_HEAPS] = {[0 ... ML_MAX_HEAPS - 1] = {.lock = ML_LOCK_INIT}};

static void *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* A fresh block of `bsize` bytes for a class whose free list is empty (heap lock held).
 * Big classes get a mapping each (a chunk would waste most of its tail on them); the others are
 * carved by bumping through the current chunk, whose unusable tail is abandoned. */
static char *carve(struct ml_heap *h, size_t bsize)
{
    if (bsize > ML_CHUNK / 16)
        return map(bsize);
    if ((size_t)(h->bump_end - h->bump) < bsize) {
        char *c = map(ML_CHUNK);
        if (!c)
            return NULL;
        h->bump = c;
        h->bump_end = c + ML_CHUNK;
    }
    char *b = h->bump;
    h->bump += bsize;
    return b;
}

void *ml_heap_alloc(unsigned hi, unsigned cls)
{
    struct ml_heap *h = &ml_heaps[hi];
    size_t bsize = ml_class_size(cls);
    char *blk;
    int taken = ml_lock(&h->lock);
    struct ml_free *f = h->free[cls];
    if (f) {
        h->free[cls] = f->next;
        blk = (char *)f - ML_HDR;
    } else {
        blk = carve(h, bsize);
    }
    ml_unlock(&h->lock, taken);
    if (!blk)
        return NULL;
    /* The header is written outside the lock: the block now belongs to this thread alone. */
    struct ml_hdr *hd = (struct ml_hdr *)blk;
    hd->magic = ML_MAGIC_LIVE;
    hd->heap = (uint16_t)hi;
    hd->cls = (uint16_t)cls;
    hd->size = bsize;
    return blk + ML_HDR;
}

void ml_heap_free(struct ml_hdr *hd)
{
    if (hd->heap >= ML_MAX_HEAPS || hd->cls >= ML_NCLASSES)
        ml_fatal("corrupt block header in free()");
    struct ml_heap *h = &ml_heaps[hd->heap];
    struct ml_free *f = (struct ml_free *)(hd + 1);
    hd->magic = ML_MAGIC_FREE;
    int taken = ml_lock(&h->lock);
    f->next = h->free[hd->cls];
    h->free[hd->cls] = f;
    ml_unlock(&h->lock, taken);
}
