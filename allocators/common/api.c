/* The public malloc family. These definitions interpose glibc's when the library is preloaded;
 * everything here is argument checking and errno, the work is in core.c. */
#include "ml_alloc.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define ML_API __attribute__((visibility("default")))

static int is_pow2(size_t x)
{
    return x && !(x & (x - 1));
}

ML_API void *malloc(size_t n)
{
    return ml_alloc(n);
}

ML_API void free(void *p)
{
    if (p)
        ml_release(p);
}

ML_API void *calloc(size_t count, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = ml_alloc(n);
    /* A private mapping is already zero: skip touching every page of a big calloc. */
    if (p && !ml_is_fresh_mapping(p))
        memset(p, 0, n);
    return p;
}

ML_API void *realloc(void *p, size_t n)
{
    if (!p)
        return ml_alloc(n);
    if (n == 0) { /* glibc's behaviour: free and return NULL */
        ml_release(p);
        return NULL;
    }
    struct ml_hdr *hd = ml_hdr_of(p);
    size_t have = ml_usable(p);
    if (hd->cls == ML_CLS_LARGE && n + ML_HDR > ML_MAX_CLASS_TOTAL)
        return ml_large_resize(p, n);
    /* Keep the block when the new size fits and does not waste more than half of it. */
    if (hd->cls != ML_CLS_ALIGNED && n <= have && n >= have / 2)
        return p;
    void *q = ml_alloc(n);
    if (!q)
        return NULL; /* the old block stays valid, errno is ENOMEM */
    memcpy(q, p, n < have ? n : have);
    ml_release(p);
    return q;
}

ML_API void *reallocarray(void *p, size_t count, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n);
}

ML_API int posix_memalign(void **out, size_t align, size_t n)
{
    if (!is_pow2(align) || align % sizeof(void *))
        return EINVAL;
    int saved = errno; /* posix_memalign reports through its result, not errno */
    void *p = ml_alloc_aligned(align, n);
    errno = saved;
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

ML_API void *aligned_alloc(size_t align, size_t n)
{
    if (!is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return ml_alloc_aligned(align, n);
}

ML_API void *memalign(size_t align, size_t n)
{
    /* Like glibc: a non-power-of-two alignment is rounded up to the next power of two. */
    size_t a = 1;
    while (a < align) {
        if (a > (size_t)PTRDIFF_MAX / 2) {
            errno = EINVAL;
            return NULL;
        }
        a <<= 1;
    }
    return ml_alloc_aligned(a, n);
}

ML_API void *valloc(size_t n)
{
    return ml_alloc_aligned((size_t)sysconf(_SC_PAGESIZE), n);
}

ML_API void *pvalloc(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t rounded;
    if (__builtin_add_overflow(n, page - 1, &rounded)) {
        errno = ENOMEM;
        return NULL;
    }
    return ml_alloc_aligned(page, rounded & ~(page - 1));
}

ML_API size_t malloc_usable_size(void *p)
{
    return p ? ml_usable(p) : 0;
}
