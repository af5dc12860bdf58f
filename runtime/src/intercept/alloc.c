/* The interposed malloc family: the exported entry points of the next allocator's family (ml_next,
 * family.h), through the seam (source.h). Each fast path is: subtract the size from the thread's
 * countdown (initial-exec TLS), and if it is still positive, tail-call the next allocator. free() is
 * one unsigned range compare. Everything else lives out of line in the seam's slow paths.
 *
 * The exported functions are built without a frame pointer (saves the push/mov/pop on every call);
 * they pass their return address down so every unwinder reports the caller of malloc first. They
 * start on a cache line of their own: where one began 48 bytes into a line, its fast path straddled
 * two and cost ~0.5 cycles more per malloc/free pair (fastpath.sh, an unrelated change moving it). */
#define _GNU_SOURCE
#include <errno.h>
#include <unistd.h>

#include "source.h"

#define FAST __attribute__((optimize("omit-frame-pointer"), aligned(64)))
#define RA() ((uintptr_t)__builtin_return_address(0))

ML_EXPORT FAST void *malloc(size_t size)
{
    ML_COUNTDOWN_OR(size, slow);
    return ml_next.malloc(size);
slow:
    return ml_src_malloc_slow(&ml_next, size, RA());
}

ML_EXPORT FAST void free(void *p)
{
    if (unlikely(ml_src_owns(p))) {
        ml_src_free(p);
        return;
    }
    ml_next.free(p);
}

ML_EXPORT FAST void *calloc(size_t n, size_t s)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(n, s, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    ML_COUNTDOWN_OR(total, slow);
    return ml_next.calloc(n, s);
slow:
    return ml_src_calloc_slow(&ml_next, n, s, total, RA());
}

ML_EXPORT FAST void *realloc(void *p, size_t n) { return ml_src_realloc(&ml_next, p, n, RA()); }

ML_EXPORT void *reallocarray(void *p, size_t n, size_t s)
{
    size_t total;
    if (__builtin_mul_overflow(n, s, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return ml_src_realloc(&ml_next, p, total, RA());
}

ML_EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    int err = 0;
    void *p = ml_src_aligned(&ml_next, AL_POSIX, align, size, &err, RA());
    if (!p)
        return err ? err : ENOMEM;
    *out = p;
    return 0;
}

ML_EXPORT void *aligned_alloc(size_t align, size_t size)
{
    if (align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    return ml_src_aligned(&ml_next, AL_ALIGNED, align, size, NULL, RA());
}

ML_EXPORT void *memalign(size_t align, size_t size)
{
    return ml_src_aligned(&ml_next, AL_MEMALIGN, align, size, NULL, RA());
}

/* valloc/pvalloc forward to memalign: an allocator preloaded after us may not define them, and
 * mixing glibc's valloc with another allocator's free would corrupt both heaps. */
ML_EXPORT void *valloc(size_t size)
{
    return ml_src_aligned(&ml_next, AL_MEMALIGN, (size_t)sysconf(_SC_PAGESIZE), size, NULL, RA());
}

ML_EXPORT void *pvalloc(size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t rounded = (size + page - 1) & ~(page - 1);
    if (rounded < size) {
        errno = ENOMEM;
        return NULL;
    }
    return ml_src_aligned(&ml_next, AL_MEMALIGN, page, rounded ? rounded : page, NULL, RA());
}

ML_EXPORT size_t malloc_usable_size(void *p)
{
    if (ml_src_owns(p))
        return ml_src_usable(p);
    return ml_next.malloc_usable_size(p);
}
