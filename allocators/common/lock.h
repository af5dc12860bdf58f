/* The heap lock: no atomic at all while the process has one thread, one atomic exchange to take and a
 * plain store to release once it has more, inlined into malloc and free.
 *
 * Why not pthread_mutex_t: uncontended, a mutex takes two atomic read-modify-writes per call (the
 * compare-and-swap in lock and the exchange in unlock, which must see whether a waiter sleeps) behind two
 * calls into libc. With it, `memlens bench alloc --pattern split --sizes 128 --threads 1` spent three
 * quarters of the global-lock allocator's time in the mutex and ran 2.6-3.5x slower than glibc, whose
 * thread cache takes no atomic at all: the experiment showed a slow allocator, not the study's singleton
 * allocator, which was fast on one thread and degraded as threads were added.
 *
 * While the process is single-threaded (glibc's __libc_single_threaded, which pthread_create clears
 * before the second thread exists and which never becomes true again) nothing can race for the heap, so
 * the lock is skipped — what glibc's own malloc does for its arenas (SINGLE_THREAD_P). The flag cannot
 * change during a malloc or free: only the one thread could create another, and it is busy in here.
 *
 * Contended, a waiter first spins on a plain load (no cache-line traffic until the holder releases),
 * then yields the CPU: with more threads than CPUs the holder may be descheduled, and spinning would
 * only keep it off the CPU longer. The lock stays a single global point of serialisation, which is
 * what the global-lock allocator is meant to show. */
#ifndef ML_LOCK_H
#define ML_LOCK_H

#include <sched.h>
#include <sys/single_threaded.h>

typedef struct {
    int held;
} ml_lock_t;

#define ML_LOCK_INIT {0}

/* Spins of a waiter before it yields the CPU to whoever holds the lock. */
#define ML_LOCK_SPINS 64

/* Take the lock unless the process is single-threaded; returns whether it was taken, for ml_unlock. */
static inline int ml_lock(ml_lock_t *l)
{
    if (__libc_single_threaded)
        return 0;
    if (__builtin_expect(!__atomic_exchange_n(&l->held, 1, __ATOMIC_ACQUIRE), 1))
        return 1;
    for (;;) {
        for (unsigned spins = 0; __atomic_load_n(&l->held, __ATOMIC_RELAXED); spins++) {
            if (spins < ML_LOCK_SPINS)
                __builtin_ia32_pause();
            else
                sched_yield();
        }
        if (!__atomic_exchange_n(&l->held, 1, __ATOMIC_ACQUIRE))
            return 1;
    }
}

static inline void ml_unlock(ml_lock_t *l, int taken)
{
    if (taken)
        __atomic_store_n(&l->held, 0, __ATOMIC_RELEASE);
}

#endif
