/* Blocks above the largest size class: one private mapping each, unmapped on free, resized with
 * mremap so a growing large buffer is never copied. No heap and no lock are involved. */
#define _GNU_SOURCE
#include "ml_alloc.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

static int map_len(size_t n, size_t *len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t total;
    if (__builtin_add_overflow(n, (size_t)ML_HDR + page - 1, &total))
        return 0;
    *len = total & ~(page - 1);
    return 1;
}

void *ml_large_alloc(size_t n)
{
    size_t len;
    if (!map_len(n, &len)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    struct ml_hdr *hd = p;
    hd->magic = ML_MAGIC_LIVE;
    hd->heap = 0;
    hd->cls = ML_CLS_LARGE;
    hd->size = len;
    return (char *)p + ML_HDR;
}

void ml_large_free(struct ml_hdr *hd)
{
    hd->magic = ML_MAGIC_FREE;
    munmap(hd, hd->size);
}

/* Resize a large block in place or by moving its pages; NULL (block intact) when that fails. */
void *ml_large_resize(void *p, size_t n)
{
    struct ml_hdr *hd = ml_hdr_of(p);
    size_t len;
    if (!map_len(n, &len)) {
        errno = ENOMEM;
        return NULL;
    }
    void *q = mremap(hd, hd->size, len, MREMAP_MAYMOVE);
    if (q == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    hd = q;
    hd->size = len;
    return (char *)q + ML_HDR;
}
