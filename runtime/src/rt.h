/* Private declarations shared by the runtime's own files (ctl.c/api.c use internal.h only). */
#ifndef MEMLENS_RT_H
#define MEMLENS_RT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

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
    /* Fast switch (control.c): the last switch epoch this thread's slow path saw (written by this
     * thread, read by the switcher), whether it is in the switch registry, and its sample count. */
    _Atomic uint64_t epoch;
    int registered;      /* ML_REG_*: 0 not yet, then registered, full or exited */
    uint64_t samples;    /* samples (and exact records) taken by this thread */
    /* cost.c: this thread's share of the runtime's own account (plain adds: no locked instruction
     * on the sampled path); summed over the registry when read, folded into a total at exit. */
    uint64_t cost_ns, cost_calls_fx;
    uint64_t cost_wait; /* TSC ticks spent waiting for the range lock (range.c), not counted */
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

/* ---- the allocator we forward to (resolved with dlsym(RTLD_NEXT)) ---- */
struct ml_real {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    size_t (*malloc_usable_size)(void *);
};
extern struct ml_real ml_real;

/* ---- configuration and global state ---- */
enum ml_unwinder { ML_UNW_FP, ML_UNW_LIBGCC, ML_UNW_LIBUNWIND, ML_UNW_DWARF };
struct ml_config {
    _Atomic uint64_t interval; /* 0 = exact */
    _Atomic int active;
    _Atomic int failed;        /* an internal failure switched profiling off for good */
    int unwinder;
    int max_depth;
    int ready;                 /* constructor finished: unwinders usable */
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

/* init.c */
void ml_init(void);
/* MEMLENS_CTL_DIR as it was at start-up ("" if unset): a copy, the environment may be overwritten. */
extern char ml_ctl_dir_env[4000];
void ml_fail(const char *why);
uint64_t ml_now_ns(void);
const char *ml_unwinder_name(int u);

/* range.c: the private address range holding sampled blocks and the boot arena */
extern uintptr_t ml_range_base, ml_range_span;
static inline int ml_in_range(const void *p) { return (uintptr_t)p - ml_range_base < ml_range_span; }
int ml_range_init(void);
void *ml_boot_alloc(size_t size);
/* Header right before every block in the range (128 bytes, keeps 16-byte alignment). The memory
 * fields belong to range.c; the accounting fields to block.c, which changes them with the range
 * lock held, except `size` and the pending counts, which only the thread resizing the block writes. */
struct ml_block {
    uint32_t stack;        /* stack record its weights are counted on, or ML_NO_STACK */
    uint16_t kind, cls;    /* ML_KIND_*, size class of the chunk */
    uint64_t size;         /* requested size */
    uint64_t off;          /* user pointer - chunk start */
    uint64_t cap;          /* bytes of the chunk (range.c) */
    /* block.c: what the block adds to its stack's live counts and to the heap estimate (0, 0 when
     * the block is in the range but not sampled at its current size), for `counted` bytes */
    uint64_t w_fx, w_bytes, counted;
    uint64_t born;         /* allocation tick (views.h); 0 = not timed, not in the heap estimate */
    uintptr_t ra;          /* call site of the event that chose `stack` */
    uint64_t point, point_R; /* this block's own Exp(R) draw for later resizes (0 = not drawn) */
    uint64_t pend_bytes;   /* reallocations since the last flush, counted exactly (block.c) */
    uint32_t pend_objs, gen; /* and their number; the profile generation they belong to */
    struct ml_block *prev, *next; /* the list of live sampled blocks */
    uint64_t spare_;       /* keeps the header a multiple of 16 bytes */
};
#define ML_KIND_BOOT 1u
#define ML_KIND_SAMPLED 2u
/* range.c hands out and takes back chunks; block.c does that and the accounting under one lock. */
void ml_range_lock(void);
void ml_range_unlock(void);
void ml_range_reset_lock(void);
/* For a dump: the lock, unless this thread holds it (a signal handler interrupted it) or another
 * holds it for longer than a second. 1 if taken. */
int ml_range_lock_bounded(void);
/* With the lock held: a block of `size` bytes (header filled in, accounting fields zero). A large
 * one is cleared here when `zero`; a small one's *dirty says whether its bytes held data before
 * (the caller clears it then, after the lock). NULL if the range is exhausted. */
struct ml_block *ml_range_alloc_locked(size_t size, size_t align, int zero, int *dirty);
/* Without the lock: can a block be resized to `size` within its chunk (a small block's class)? */
int ml_range_fits(const struct ml_block *b, size_t size);
/* With the lock held: grow or shrink a large block in place by taking or giving back the pages
 * after it; 1 (and the block's size and cap are set) or 0. */
int ml_range_resize_locked(struct ml_block *b, size_t size);
void ml_range_free_locked(struct ml_block *b);
/* Real bytes of the chunks of live sampled blocks (the allocator does not see them). */
int64_t ml_range_live_bytes(void);
static inline struct ml_block *ml_block_of(void *p) { return (struct ml_block *)p - 1; }
void ml_range_lock(void);
void ml_range_unlock(void);
void ml_range_reset_lock(void);

/* block.c: every event of a sampled block, and every figure it feeds (block.c explains) */
/* A sampled block of `size` bytes on stack `id` with weights (w_fx, w_bytes), from call site ra. */
void *ml_block_new(size_t size, size_t align, int zero, uint32_t id, uint64_t w_fx, uint64_t w_bytes,
                   uintptr_t ra);
void ml_sampled_free(void *p);
/* realloc of a sampled block to n > 0 bytes: in place, or moved (within the range when it can);
 * NULL if no memory (p is left as it was). */
void *ml_block_realloc(void *p, size_t n, uintptr_t ra);
/* fork child: inherited blocks, a fresh peak and timeline */
void ml_blocks_fork_child(void);
/* ml_reset: reallocations pending before it are not counted */
void ml_blocks_reset(void);
/* Before a dump's stack lines (dump lock held): what live blocks have not flushed yet, per stack
 * (ml_blocks_unflushed: alloc_fx, alloc_bytes, inuse_fx, inuse_bytes to add), and the heap
 * estimate's share of it. */
void ml_blocks_dump_begin(void);
void ml_blocks_unflushed(const struct ml_stack *r, int64_t d[4]);
int64_t ml_blocks_dump_heap(void);

/* sample.c */
/* The stack of the current allocation (ra: the return address into malloc's caller) in the table;
 * ML_NO_STACK if it is full. Counts truncated stacks and fallbacks when `sample`. */
uint32_t ml_sample_stack(uintptr_t ra, int sample);
/* The weights of a sample of `size` bytes at interval R (0: exact): 1/p in 16.16 fixed point
 * (objects) and size/p, p = 1 - exp(-size/R). */
void ml_weights(uint64_t size, uint64_t R, uint64_t *fx, uint64_t *bytes);
/* Exp(R) bytes for this thread (for a block's own draw); at least 1. */
uint64_t ml_draw(uint64_t R);
/* Fork child: a fresh random state and countdown for the thread that forked. */
void ml_sample_fork_child(void);


/* unwind.c */
#define ML_UNWIND_BUF (ML_MAX_DEPTH + 16 + 1)
int ml_unwind(uintptr_t *buf, int max, int *truncated, uintptr_t ra, const uintptr_t **out);
void ml_unwind_setup(void);
/* Top of the current thread's stack (above every frame). */
uintptr_t ml_stack_top(void);
/* Is sp on the thread's own stack (below top `hi`), rather than a coroutine's or a sigaltstack? */
int ml_on_own_stack(uintptr_t sp, uintptr_t hi);
/* Can the aligned word at addr be read (checked with the kernel; for foreign stacks)? */
int ml_readable(uintptr_t addr);
/* dwarf.c: the stack of the current allocation as a stack id, via CFI rules and the per-thread
 * stack cache; 0 if this stack needs another unwinder. */
int ml_dwarf_stack(uintptr_t ra, int max, uint32_t *id, int *trunc);
/* Code was unloaded (dlclose): rules and cached stacks may no longer hold. */
void ml_dwarf_code_unloaded(void);
void ml_self_text(uintptr_t lo, uintptr_t hi);

/* stacks.c */
#define ML_NO_STACK 0xffffffffu
struct ml_stack {
    uint64_t hash;
    uint32_t depth, flags;
    _Atomic uint64_t samples, alloc_fx, alloc_bytes;
    _Atomic int64_t inuse_fx, inuse_bytes;
    /* views.h: peak set, lifetimes, live age (zero in a fresh record) */
    _Atomic int64_t peak_fx, peak_bytes;       /* inuse at the last peak snapshot */
    _Atomic uint64_t age_sum;                  /* sum of w_bytes * age units (views.h) of timed live blocks */
    _Atomic int64_t age_w;                     /* sum of their w_bytes */
    int64_t dumped_inuse;                      /* inuse_bytes at the previous dump (growth) */
    _Atomic uint64_t life[10];                 /* w_bytes freed, by lifetime decade (ML_LIFE_BUCKETS) */
    /* a dump's scratch (dump lock held): what live blocks have not flushed yet (block.c), valid
     * when d_gen is the dump's: only the records a dump adds to are written */
    int64_t d_alloc_fx, d_alloc_bytes, d_inuse_fx, d_inuse_bytes;
    uint32_t d_gen;
    uintptr_t pcs[];
};
int ml_stacks_init(void);
uint32_t ml_stack_intern(const uintptr_t *pcs, int depth, int truncated);
struct ml_stack *ml_stack_get(uint32_t id);
uint32_t ml_stack_count(void);
/* The table's limit (MEMLENS_MAX_STACKS) and the samples of new stacks dropped at it. */
uint32_t ml_stacks_max(void);
uint64_t ml_stacks_full_drops(void);
void ml_stacks_zero_alloc(void);
/* Sums over the table, for status: samples and estimated bytes allocated. */
void ml_stacks_totals(uint64_t *samples, uint64_t *alloc_bytes);
void ml_stacks_each(void (*fn)(struct ml_stack *, void *), void *arg);
/* The same, in creation order, over a dense list: cheap enough for a peak snapshot. */
void ml_stacks_each_listed(void (*fn)(struct ml_stack *, void *), void *arg);
/* Fork child: cumulative counts restart at zero without writing every record (stacks.c). */
void ml_stacks_fork_child(void);
/* The record still holds the parent's cumulative counts (read them as zero). */
int ml_stack_stale(const struct ml_stack *r);
/* Call before adding to a record's cumulative counts. */
void ml_stack_touch(struct ml_stack *r);

/* dump.c / modules.c */
int ml_dump_reason(const char *reason);
void ml_modules_write(struct ml_out *o);
/* Dump to the next `<MEMLENS_OUT>.<pid>.<seq>.raw`, telling which <seq>; 0 or -errno. */
int ml_dump_auto_seq(const char *reason, uint64_t *which);
void ml_dump_auto_remove(uint64_t which);
void ml_dump_lock_reset(void);
void ml_modules_reset_lock(void);
void ml_dump_lock(void);
void ml_dump_unlock(void);

/* fmt.c: digits without stdio or malloc. buf holds at least ML_FMT_MAX bytes; both return the length
 * written (a NUL follows). ml_fmt_u64 pads with zeros to `width` digits (0: no padding, width < 21). */
#define ML_FMT_MAX 24
size_t ml_fmt_u64(char *buf, uint64_t v, int width);
size_t ml_fmt_hex(char *buf, uint64_t v); /* "0x…" */

/* out.c: a small buffered writer for dumps and log lines (no stdio, no malloc) */
struct ml_out { int fd; int err; size_t n; char buf[4096]; };
void ml_out_str(struct ml_out *o, const char *s);
void ml_out_path(struct ml_out *o, const char *s);
void ml_out_u64(struct ml_out *o, uint64_t v);
void ml_out_i64(struct ml_out *o, int64_t v);
void ml_out_hex(struct ml_out *o, uint64_t v);
void ml_out_flush(struct ml_out *o);

/* fork.c */
void ml_fork_setup(void);

/* jeprof.c: the control socket's `jemalloc status|start LG|stop` request; writes the reply line. */
void ml_jemalloc_ctl(const char *arg, char *out, size_t cap);

/* control.c: the fast switch. Every start/stop/interval change bumps ml_epoch and forces each
 * registered thread's countdown to 0, so its next allocation takes the slow path, which sees the new
 * epoch and re-arms for the new state. */
extern _Atomic uint64_t ml_epoch;
enum { ML_REG_NO, ML_REG_YES, ML_REG_FULL, ML_REG_EXITED };
/* control.c: call f on every registered thread, the registry locked (threads do not come or go
 * meanwhile); -1 if the lock could not be taken within ~1 ms (its holder was interrupted). */
int ml_threads_each(void (*f)(struct ml_thread *t, void *arg), void *arg);
void ml_cost_thread_exit(struct ml_thread *t); /* cost.c */
void ml_thread_register(struct ml_thread *t);

/* spin lock usable before init, and resettable in a fork child */
static inline void ml_spin_lock(_Atomic int *l)
{
    while (atomic_exchange_explicit(l, 1, memory_order_acquire))
        __builtin_ia32_pause();
}
static inline void ml_spin_unlock(_Atomic int *l) { atomic_store_explicit(l, 0, memory_order_release); }

#pragma GCC visibility pop

#endif
