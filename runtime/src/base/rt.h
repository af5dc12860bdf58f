/* The shared base of the runtime's files: per-thread state and the configuration (defined in rt.c,
 * read everywhere), the fast path's countdown test, and a few macros. Each .c file's own functions
 * are declared in a header of the same name (range.h for range.c, ...); the allocators we forward
 * to are the seam's (intercept/family.h). */
#ifndef MEMLENS_RT_H
#define MEMLENS_RT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Everything declared below is defined inside libmemlens.so: saying so lets the compiler address it
 * directly (rip-relative) instead of through the GOT, which keeps the fast paths short. */
#pragma GCC visibility push(hidden)

struct ml_out;
struct ml_stack;

#define ML_EXPORT __attribute__((visibility("default")))
#define ML_NOINLINE __attribute__((noinline))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define ML_MAX_DEPTH 128
#define ML_POLL_BUDGET (1 << 20) /* bytes between checks of the global state while inactive */

/* ---- per-thread state (initial-exec TLS: one %fs-relative access, never __tls_get_addr) ---- */
struct ml_thread {
    int64_t countdown;   /* bytes until the next slow path; <= 0 => slow path */
    int busy;            /* inside the runtime: nested allocations go straight to the real allocator */
    int in_init;         /* this thread is running ml_init: allocations come from the boot arena */
    uint64_t rng;        /* xorshift state, 0 = thread not set up yet */
    uintptr_t stack_hi;  /* top of this thread's stack, for the frame-pointer unwinder */
    uint64_t armed;      /* interval R the countdown was drawn for; 0 = poll budget, ~0 = exact */
    int64_t next;        /* the countdown after this one, drawn ahead (for interval `armed`) */
    /* The last sample's weights, for (w_size, w_R): programs allocate few distinct sizes, and this
     * saves an expm1 on most samples. */
    uint64_t w_size, w_R, w_fx, w_bytes;
    /* The same for the half-samples' weight and the chance a block is in both (block.c,
     * choose_halves), for (h_size, h_R): another expm1 and a division saved. */
    uint64_t h_size, h_R, h_w;
    double h_both;
    /* The last usable size asked of an allocator (source.c, room_of), for (room_fam, room_size): a
     * probe of the allocator saved on most samples, as the weights above save an expm1. */
    const void *room_fam;
    uint64_t room_size, room;
    /* Fast switch (switch.c): the last switch epoch this thread's slow path saw (written by this
     * thread, read by the switcher), whether it is in the switch registry, and its sample count. */
    _Atomic uint64_t epoch;
    int registered;      /* ML_REG_*: 0 not yet, then registered, full or exited */
    uint64_t samples;    /* samples (and exact records) taken by this thread */
    /* cost.c: this thread's share of the runtime's own account (plain adds: no locked instruction
     * on the sampled path); summed over the registry when read, folded into a total at exit. */
    uint64_t cost_ns, cost_calls_fx;
    uint64_t cost_wait; /* TSC ticks spent waiting for the range lock (range.c), not counted */
    /* ML_STACK_* bits (stacks.h) the stack being interned gets besides its frames: the kind of
     * source being sampled (source.c sets it around the unwind), so an mmap stack is its own. */
    uint32_t stack_flags;
    /* The heap-estimate changes this thread makes now are of anonymous mappings (mmap.c sets it
     * around the birth and free of its shadows): peak.c keeps their share apart for the timeline. */
    int mmap_acct;
};
extern __thread struct ml_thread ml_tls;

/* The fast-path test: subtract `size` from this thread's countdown and jump to `slow` if it is no
 * longer positive. One read-modify-write on %fs-relative memory whose flags feed the branch; the
 * compiler's version of the same C needs a load, a store and a test more. `countdown` must stay the
 * first member of struct ml_thread. */
#define ML_COUNTDOWN_OR(size, slow)                                                                    \
    __asm__ goto("movq ml_tls@gottpoff(%%rip), %%rax\n\t"                                              \
                 "subq %0, %%fs:(%%rax)\n\t"                                                           \
                 "jle %l[" #slow "]"                                                                   \
                 :                                                                                     \
                 : "r"((int64_t)(size))                                                                \
                 : "rax", "cc", "memory"                                                               \
                 : slow)

/* The thread is inside the runtime (a sampled path, a dump, the runtime's own thread): allocations
 * it makes go straight to the allocator (sample.c), and a signal handler that interrupts it does not
 * re-enter the sampled path: its allocations are forwarded, and a free or realloc of a sampled block
 * is done without our locks (block.c defers the free). Entered before any lock of the sampled path
 * is taken. The fences keep the compiler from moving the count across the code it guards: a handler
 * running on this thread must see it. */
static inline void ml_busy_enter(void)
{
    ml_tls.busy++;
    atomic_signal_fence(memory_order_seq_cst);
}
static inline void ml_busy_leave(void)
{
    atomic_signal_fence(memory_order_seq_cst);
    ml_tls.busy--;
}

/* ---- configuration and global state ---- */
enum ml_unwinder { ML_UNW_FP, ML_UNW_LIBGCC, ML_UNW_LIBUNWIND, ML_UNW_DWARF };
struct ml_config {
    _Atomic uint64_t interval; /* 0 = exact */
    _Atomic int active;
    _Atomic int failed;        /* an internal failure switched profiling off for good */
    int unwinder;
    int max_depth;
    int ready;                 /* constructor finished: unwinders usable */
    int mmap;                  /* sample anonymous mmap (intercept/mmap.c); MEMLENS_MMAP=0: not */
    _Atomic int ctl_pending;   /* a fork child whose control thread is not started yet */
    const char *out;           /* MEMLENS_OUT or NULL */
    int64_t pid;               /* pid the state belongs to (differs from getpid() in a vfork child) */
    int is_fork_child;
    _Atomic int exit_dumped;  /* the exit dump was written (destructor or _exit, whichever first) */
    _Atomic uint64_t start_ns;
    /* The counters samplers write (truncated, dropped, unwind_fallbacks, dropped_bytes, …) are in
     * the state's header (state.h: a line of their own, and in the file that outlives us). The
     * sample count and bytes are not kept anywhere but summed from the stack table when asked for
     * (a shared counter would be one more cache line bouncing between threads on every sample). */
};
extern struct ml_config ml_cfg;

/* CLOCK_REALTIME in ns (dump headers, the timeline, the state file). */
static inline uint64_t ml_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* spin lock usable before init, and resettable in a fork child */
static inline void ml_spin_lock(_Atomic int *l)
{
    while (atomic_exchange_explicit(l, 1, memory_order_acquire))
        __builtin_ia32_pause();
}
static inline void ml_spin_unlock(_Atomic int *l) { atomic_store_explicit(l, 0, memory_order_release); }

#pragma GCC visibility pop

#endif
