/* The fast switch: how start, stop and a new interval (control.c) reach every thread.
 *
 * The fast path reads no shared state, so a switch (start, stop, a new interval) has to reach each
 * thread through its own countdown. Every switch bumps ml_epoch and stores 0 into the countdown of
 * every registered thread: its next allocation takes the slow path, which acknowledges the epoch and
 * re-arms for the new state. The fast path's `subq` on the countdown is a plain read-modify-write, so
 * a store that lands inside one is lost: the switcher re-stores, for a bounded time, until each
 * thread has acknowledged. A thread that does not allocate meanwhile is not inside a `subq` either,
 * so the store it has stays and it switches at its next allocation.
 *
 * Threads register on their first slow path and unregister from a pthread key destructor, which
 * runs before their stack and TLS are freed: the switcher, which holds the registry lock while it
 * stores, never writes into a dead thread. */
#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>

#include "cost.h"
#include "switch.h"

#define ML_REG_MAX 4096
#define ML_SWITCH_WAIT_NS 50000 /* how long a switch re-stores for threads that have not acknowledged */

_Atomic uint64_t ml_epoch;

static struct reg {
    struct ml_thread *t;
    pthread_t self;
} reg[ML_REG_MAX];
static int reg_n;
static pid_t reg_pid;
static _Atomic int reg_lock;
static pthread_key_t reg_key;
static _Atomic int key_state; /* 0 none, 1 creating, 2 ready, 3 failed */

/* What the last switch did, for memlens_last_switch(). */
static _Atomic uint64_t sw_threads, sw_pending, sw_ns;

/* In a forked child only the forking thread exists: drop the others (their memory is a copy). */
static void reg_after_fork(void)
{
    pid_t pid = getpid();
    if (reg_pid == pid)
        return;
    int n = 0;
    for (int i = 0; i < reg_n; i++)
        if (pthread_equal(reg[i].self, pthread_self()))
            reg[n++] = reg[i];
    reg_n = n;
    reg_pid = pid;
}

static void reg_lock_take(void)
{
    /* The lock of a parent thread that forked while a switch was under way stays held in the child,
     * whose only thread we are: take it over. */
    if (reg_pid != 0 && reg_pid != getpid())
        atomic_store(&reg_lock, 0);
    ml_spin_lock(&reg_lock);
    reg_after_fork();
}

static void reg_exit(void *arg)
{
    struct ml_thread *t = arg;
    reg_lock_take();
    ml_cost_thread_exit(t); /* under the lock: a reader sums either the thread or the total */
    for (int i = 0; i < reg_n; i++)
        if (reg[i].t == t) {
            reg[i] = reg[--reg_n];
            break;
        }
    ml_spin_unlock(&reg_lock);
    t->registered = ML_REG_EXITED;
}

static int key_ready(void)
{
    int s = atomic_load(&key_state);
    if (s == 0) {
        int zero = 0;
        if (atomic_compare_exchange_strong(&key_state, &zero, 1))
            atomic_store(&key_state, pthread_key_create(&reg_key, reg_exit) == 0 ? 2 : 3);
    }
    while ((s = atomic_load(&key_state)) == 1)
        __builtin_ia32_pause();
    return s == 2;
}

void ml_thread_register(struct ml_thread *t)
{
    t->busy++; /* pthread_setspecific may allocate (keys beyond the first 32) */
    t->registered = ML_REG_FULL;
    if (key_ready()) {
        reg_lock_take();
        if (reg_n < ML_REG_MAX && pthread_setspecific(reg_key, t) == 0) {
            reg[reg_n++] = (struct reg){t, pthread_self()};
            t->registered = ML_REG_YES;
        }
        ml_spin_unlock(&reg_lock);
    }
    t->busy--;
}

/* Make every registered thread take the slow path at its next allocation. */
void ml_switch_kick(void)
{
    uint64_t e = atomic_fetch_add(&ml_epoch, 1) + 1;
    uint64_t t0 = ml_now_ns(), pending = 0;
    reg_lock_take();
    for (;;) {
        pending = 0;
        for (int i = 0; i < reg_n; i++) {
            struct ml_thread *t = reg[i].t;
            if (atomic_load_explicit(&t->epoch, memory_order_acquire) >= e)
                continue;
            __atomic_store_n(&t->countdown, 0, __ATOMIC_RELAXED);
            if (t != &ml_tls) /* our own store cannot be lost: we are not in malloc */
                pending++;
        }
        if (!pending || ml_now_ns() - t0 > ML_SWITCH_WAIT_NS)
            break;
        for (int k = 0; k < 64; k++)
            __builtin_ia32_pause();
    }
    atomic_store(&sw_threads, (uint64_t)reg_n);
    ml_spin_unlock(&reg_lock);
    atomic_store(&sw_pending, pending);
    atomic_store(&sw_ns, ml_now_ns() - t0);
}

int ml_threads_each(void (*f)(struct ml_thread *t, void *arg), void *arg)
{
    /* Bounded: a dump may run in a signal handler that interrupted this lock's holder. */
    if (reg_pid != 0 && reg_pid != getpid())
        atomic_store(&reg_lock, 0);
    for (int spins = 0; atomic_exchange_explicit(&reg_lock, 1, memory_order_acquire); spins++) {
        if (spins > (1 << 20))
            return -1;
        __builtin_ia32_pause();
    }
    reg_after_fork();
    for (int i = 0; i < reg_n; i++)
        f(reg[i].t, arg);
    ml_spin_unlock(&reg_lock);
    return 0;
}

void ml_last_switch(uint64_t *threads, uint64_t *pending, uint64_t *ns)
{
    *threads = atomic_load(&sw_threads);
    *pending = atomic_load(&sw_pending);
    *ns = atomic_load(&sw_ns);
}
