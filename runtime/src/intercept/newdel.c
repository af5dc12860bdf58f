/* C++ operator new/delete, entry points of the next allocator's family too (source.h). With glibc,
 * libstdc++'s operator new calls malloc and we would see it anyway; but an allocator preloaded after
 * us (jemalloc, tcmalloc) defines its own operator new that calls its internal malloc directly,
 * bypassing our malloc. Defining them here keeps new/delete profiled over every allocator, and makes
 * the caller of `new` the first frame of the stack (so even the frame-pointer unwinder names it). On failure we hand over to the next operator new, which runs
 * the new_handler loop and throws std::bad_alloc as the program expects. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "source.h"

#define FAST __attribute__((optimize("omit-frame-pointer")))
#define RA() ((uintptr_t)__builtin_return_address(0))

typedef void *(*new1)(size_t);
typedef void *(*new2)(size_t, size_t);

static ML_NOINLINE void *next_new(const char *sym, size_t n)
{
    new1 f = (new1)dlsym(RTLD_NEXT, sym);
    return f ? f(n) : NULL;
}

static ML_NOINLINE void *next_new_aligned(const char *sym, size_t n, size_t al)
{
    new2 f = (new2)dlsym(RTLD_NEXT, sym);
    return f ? f(n, al) : NULL;
}

static inline void *new_from(size_t n, uintptr_t ra) { return ml_src_malloc(&ml_next, n ? n : 1, ra); }

static inline void *new_aligned_from(size_t n, size_t al, uintptr_t ra)
{
    if (al < sizeof(void *))
        al = sizeof(void *);
    return ml_src_aligned(&ml_next, AL_MEMALIGN, al, n ? n : 1, NULL, ra);
}

/* The slow path of the throwing new, entered by a tail call: its frame then holds the return address
 * into the caller of new, which is how the dwarf unwinder finds where that caller's frame is. */
static ML_NOINLINE void *new_slow(const char *sym, size_t n, uintptr_t ra)
{
    void *p = ml_src_malloc_slow(&ml_next, n ? n : 1, ra);
    return likely(p != NULL) ? p : next_new(sym, n);
}

/* The nothrow argument is a reference to std::nothrow_t: a pointer we never read. */
#define NEW(name, sym)                                                                                 \
    ML_EXPORT FAST void *name(size_t n)                                                                \
    {                                                                                                  \
        ML_COUNTDOWN_OR(n ? n : 1, slow);                                                              \
        void *p = ml_next.malloc(n ? n : 1);                                                           \
        return likely(p != NULL) ? p : next_new(sym, n);                                               \
    slow:                                                                                              \
        return new_slow(sym, n, RA());                                                                 \
    }
#define NEW_NOTHROW(name)                                                                              \
    ML_EXPORT FAST void *name(size_t n, const void *nt)                                                \
    {                                                                                                  \
        (void)nt;                                                                                      \
        return new_from(n, RA());                                                                      \
    }
#define NEW_ALIGNED(name, sym)                                                                         \
    ML_EXPORT void *name(size_t n, size_t al)                                                          \
    {                                                                                                  \
        void *p = new_aligned_from(n, al, RA());                                                       \
        return likely(p != NULL) ? p : next_new_aligned(sym, n, al);                                   \
    }
#define NEW_ALIGNED_NOTHROW(name)                                                                      \
    ML_EXPORT void *name(size_t n, size_t al, const void *nt)                                          \
    {                                                                                                  \
        (void)nt;                                                                                      \
        return new_aligned_from(n, al, RA());                                                          \
    }

/* The nothrow variants return NULL when the allocator fails (they do not run the new_handler). */
NEW(_Znwm, "_Znwm")
NEW(_Znam, "_Znam")
NEW_NOTHROW(_ZnwmRKSt9nothrow_t)
NEW_NOTHROW(_ZnamRKSt9nothrow_t)
NEW_ALIGNED(_ZnwmSt11align_val_t, "_ZnwmSt11align_val_t")
NEW_ALIGNED(_ZnamSt11align_val_t, "_ZnamSt11align_val_t")
NEW_ALIGNED_NOTHROW(_ZnwmSt11align_val_tRKSt9nothrow_t)
NEW_ALIGNED_NOTHROW(_ZnamSt11align_val_tRKSt9nothrow_t)

/* Every delete is a free: sampled blocks are ours, the rest go to the allocator that made them. */
static inline void del(void *p)
{
    if (unlikely(ml_src_owns(p)))
        ml_src_free(p);
    else
        ml_next.free(p);
}

ML_EXPORT FAST void _ZdlPv(void *p) { del(p); }
ML_EXPORT FAST void _ZdaPv(void *p) { del(p); }
ML_EXPORT FAST void _ZdlPvm(void *p, size_t n) { (void)n; del(p); }
ML_EXPORT FAST void _ZdaPvm(void *p, size_t n) { (void)n; del(p); }
ML_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt; del(p); }
ML_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt; del(p); }
ML_EXPORT void _ZdlPvSt11align_val_t(void *p, size_t al) { (void)al; del(p); }
ML_EXPORT void _ZdaPvSt11align_val_t(void *p, size_t al) { (void)al; del(p); }
ML_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) { (void)n; (void)al; del(p); }
ML_EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) { (void)n; (void)al; del(p); }
ML_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) { (void)al; (void)nt; del(p); }
ML_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) { (void)al; (void)nt; del(p); }
