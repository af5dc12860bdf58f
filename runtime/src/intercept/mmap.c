/* Anonymous memory malloc does not see (issue 31): mmap, mremap and munmap interposed (they are
 * reached through the PLT like malloc), sampled by the same byte countdown and recorded as the
 * seam's ML_SRC_MMAP kind (its stacks carry ML_STACK_MMAP, the profile labels them kind=mmap).
 *
 * What counts: MAP_ANONYMOUS mappings that are not PROT_NONE (a reservation holds no memory), made
 * by the program. Not counted: the runtime's own (its thread is busy, or the call comes from our
 * module), and glibc's malloc's large blocks, which glibc maps through its internal __mmap, not
 * the PLT (they are malloc's, already counted).
 *
 * A sampled mapping is kept by range in a table of its own (munmap may cut any part of it, which
 * the seam's by-address model cannot see): a munmap removes what it covers whole and trims what it
 * covers partly; mremap moves or resizes it. The weights stay those of the mapping at mmap time.
 * munmap and mremap scan the table only while a sampled mapping is live. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../store/state.h"
#include "../unwind/unwind.h"
#include "source.h"

#define RA() ((uintptr_t)__builtin_return_address(0))
#define MAPS_MAX 65536

struct map { uintptr_t lo, hi; void *shadow; };
static struct map *maps;
static uint32_t nmaps;
static _Atomic uint32_t live;
static _Atomic int lock;

static int ours(int flags, int prot, uintptr_t ra)
{
    return ml_cfg.mmap && (flags & MAP_ANONYMOUS) && prot != PROT_NONE && !ml_tls.busy && !ml_tls.in_init && ml_cfg.ready &&
           !ml_unwind_is_self(ra);
}

/* The table is mapped on the first sample (by the syscall: never through ourselves). */
static int maps_ready(void)
{
    if (maps)
        return 1;
    long p = syscall(SYS_mmap, NULL, (size_t)MAPS_MAX * sizeof *maps, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == -1)
        return 0;
    maps = (struct map *)p;
    return 1;
}

static ML_NOINLINE void observe(void *p, size_t len, uintptr_t ra)
{
    void *shadow = ml_src_observe_sample(ML_SRC_MMAP, len, ra);
    if (!shadow)
        return;
    ml_spin_lock(&lock);
    int kept = maps_ready() && nmaps < MAPS_MAX;
    if (kept) {
        maps[nmaps++] = (struct map){ (uintptr_t)p, (uintptr_t)p + len, shadow };
        atomic_store_explicit(&live, nmaps, memory_order_relaxed);
    }
    ml_spin_unlock(&lock);
    if (!kept) { /* counts as allocated, not live (as `untracked`) */
        atomic_fetch_add_explicit(&ml_st->untracked, 1, memory_order_relaxed);
        ml_src_free(shadow);
    }
}

/* [lo, hi) is unmapped: sampled mappings it covers whole are freed, those it covers partly keep
 * what is left (a hole in the middle keeps the lower part). */
static ML_NOINLINE void unmapped(uintptr_t lo, uintptr_t hi)
{
    void *gone[64];
    int ngone = 0;
    ml_spin_lock(&lock);
    for (uint32_t i = 0; i < nmaps;) {
        struct map *m = &maps[i];
        if (m->hi <= lo || m->lo >= hi) {
            i++;
        } else if (lo <= m->lo && hi >= m->hi) {
            if (ngone == 64) /* the shadows are freed outside the lock: the rest in another pass */
                break;
            gone[ngone++] = m->shadow;
            *m = maps[--nmaps];
        } else {
            if (lo > m->lo)
                m->hi = lo;
            else
                m->lo = hi < m->hi ? hi : m->hi;
            i++;
        }
    }
    atomic_store_explicit(&live, nmaps, memory_order_relaxed);
    ml_spin_unlock(&lock);
    for (int i = 0; i < ngone; i++)
        ml_src_free(gone[i]);
    if (ngone == 64)
        unmapped(lo, hi);
}

/* A sampled mapping at old moved to q and now spans len bytes. */
static ML_NOINLINE void remapped(uintptr_t old, uintptr_t q, size_t len)
{
    ml_spin_lock(&lock);
    for (uint32_t i = 0; i < nmaps; i++)
        if (maps[i].lo == old) {
            maps[i].lo = q;
            maps[i].hi = q + len;
            break;
        }
    ml_spin_unlock(&lock);
}

static inline int any_live(void) { return atomic_load_explicit(&live, memory_order_relaxed) != 0; }

ML_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    void *p = (void *)r;
    if (r == -1)
        return MAP_FAILED;
    if ((flags & MAP_FIXED) && any_live())
        unmapped((uintptr_t)p, (uintptr_t)p + len); /* replaced what was there */
    if (!ours(flags, prot, RA()))
        return p;
    ML_COUNTDOWN_OR(len, slow);
    return p;
slow:
    observe(p, len, RA());
    return p;
}

ML_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

ML_EXPORT int munmap(void *addr, size_t len)
{
    long r = syscall(SYS_munmap, addr, len);
    if (r == 0 && any_live())
        unmapped((uintptr_t)addr, (uintptr_t)addr + ((len + 4095) & ~(size_t)4095));
    return (int)r;
}

ML_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    void *want = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    long r = syscall(SYS_mremap, old, old_len, new_len, flags, want);
    if (r == -1)
        return MAP_FAILED;
    if (any_live() && old_len)
        remapped((uintptr_t)old, (uintptr_t)r, new_len);
    return (void *)r;
}
