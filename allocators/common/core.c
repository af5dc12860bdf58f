/* Core allocation paths shared by the malloc-family entry points: size → class or large block,
 * over-aligned blocks, and finding a block's header again on free. */
#include "ml_alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

void ml_fatal(const char *msg)
{
    static const char pre[] = "memlens allocator: ";
    (void)!write(2, pre, sizeof pre - 1);
    size_t n = 0;
    while (msg[n])
        n++;
    (void)!write(2, msg, n);
    (void)!write(2, "\n", 1);
    abort();
}

void *ml_alloc(size_t n)
{
    /* Objects larger than PTRDIFF_MAX break pointer subtraction; refuse them as glibc does. */
    if (n > (size_t)PTRDIFF_MAX - ML_HDR) {
        errno = ENOMEM;
        return NULL;
    }
    size_t total = n + ML_HDR;
    if (total > ML_MAX_CLASS_TOTAL)
        return ml_large_alloc(n);
    if (total < ML_MIN_BLOCK)
        total = ML_MIN_BLOCK;
    void *p = ml_heap_alloc(ml_pick_heap(), ml_class_of(total));
    if (!p)
        errno = ENOMEM;
    return p;
}

struct ml_hdr *ml_hdr_of(const void *p)
{
    struct ml_hdr *hd = (struct ml_hdr *)((char *)p - ML_HDR);
    if (hd->magic != ML_MAGIC_LIVE)
        ml_fatal(hd->magic == ML_MAGIC_FREE ? "double free or use of a freed block" : "free() of a pointer not from this allocator");
    return hd;
}

/* The header of the block that really owns `p`, whose own header is `hd` (skipping an aligned block's
 * offset header), and the distance from that block's start to `p`. */
static struct ml_hdr *owner(const void *p, struct ml_hdr *hd, size_t *offset)
{
    *offset = 0;
    if (hd->cls == ML_CLS_ALIGNED) {
        *offset = hd->size;
        hd = ml_hdr_of((const char *)p - hd->size);
    }
    return hd;
}

void ml_release(void *p)
{
    size_t off;
    struct ml_hdr *inner = ml_hdr_of(p);
    struct ml_hdr *hd = owner(p, inner, &off);
    if (off)
        inner->magic = ML_MAGIC_FREE; /* so a second free of the aligned pointer is caught */
    if (hd->cls == ML_CLS_LARGE)
        ml_large_free(hd);
    else
        ml_heap_free(hd);
}

size_t ml_usable(const void *p)
{
    size_t off;
    struct ml_hdr *hd = owner(p, ml_hdr_of(p), &off);
    return (size_t)hd->size - ML_HDR - off;
}

int ml_is_fresh_mapping(const void *p)
{
    return ml_hdr_of(p)->cls == ML_CLS_LARGE;
}

/* Alignment above 16: allocate `align` extra bytes, return the first aligned address inside, and put
 * an offset header just before it. The offset is a non-zero multiple of 16, so that header never
 * overlaps the real one. */
void *ml_alloc_aligned(size_t align, size_t n)
{
    if (align <= ML_HDR)
        return ml_alloc(n);
    size_t padded;
    if (align > (size_t)PTRDIFF_MAX / 2 || __builtin_add_overflow(n, align, &padded)) {
        errno = ENOMEM;
        return NULL;
    }
    char *raw = ml_alloc(padded);
    if (!raw)
        return NULL;
    uintptr_t a = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
    if (a == (uintptr_t)raw)
        return raw;
    struct ml_hdr *hd = (struct ml_hdr *)(a - ML_HDR);
    hd->magic = ML_MAGIC_LIVE;
    hd->heap = 0;
    hd->cls = ML_CLS_ALIGNED;
    hd->size = a - (uintptr_t)raw;
    return (void *)a;
}
