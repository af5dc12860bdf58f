/* The runtime's state in a file that outlives the process (state.c explains). */
#ifndef MEMLENS_STATE_H
#define MEMLENS_STATE_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

#define ML_STATE_VERSION 1
#define ML_STATE_MODULES 256  /* modules remembered (loaded, or dlclose'd since start) */
#define ML_STATE_POINTS 4096  /* timeline points */
#define ML_STATE_SEGS 8
#define ML_STATE_DIR 2048     /* the field directory's place in the header page (state.c) */

/* Where each field of a stack record (struct ml_stack) is, so that a reader needs no copy of the
 * struct: the header lists their offsets in this order. */
enum {
    ML_OFF_SAMPLES, ML_OFF_ALLOC_FX, ML_OFF_ALLOC_BYTES, ML_OFF_INUSE_FX, ML_OFF_INUSE_BYTES,
    ML_OFF_PEAK_FX, ML_OFF_PEAK_BYTES, ML_OFF_AGE_SUM, ML_OFF_AGE_W, ML_OFF_LIFE, ML_OFF_DEPTH,
    ML_OFF_FLAGS, ML_OFF_PCS, ML_OFF_N
};

/* One module: what the dump's `module` and `segment` lines say. */
struct ml_state_module {
    uint64_t base;
    uint64_t lo, hi;             /* the run-time span of its mappings: "is this pc in it" */
    uint32_t state;              /* 0 being written, 1 loaded, 2 dlclose'd */
    uint32_t nseg, idlen, pad_;
    unsigned char id[32];
    struct { uint64_t vaddr, memsz, offset; uint32_t flags, pad_; } seg[ML_STATE_SEGS];
    char path[512];
};

struct ml_state_point {
    uint64_t ns;
    int64_t heap, rss, in_use, footprint;
    int64_t mmap; /* anonymous mappings' share of the estimate, apart from `heap` (-1 unknown) */
};

/* ML_ST_NOTHING: the image ended with nothing of its own to dump (a fork child that exec'd or exited
 * without sampling, its table never copied from its parent's) */
enum { ML_ST_RUNNING = 1, ML_ST_DUMPED = 2, ML_ST_NOTHING = 3 };
#define ML_SEQ_NOTHING (~0ull - 1) /* ml_state_final: ended with nothing of its own */

/* The file's first page. Fields a reader needs are plain integers at fixed places; the process's
 * counters and the views' scalars live here too, where the runtime updates them. */
struct ml_state {
    char magic[16];                    /* "memlens-state\n" */
    uint32_t version, header_bytes;
    uint32_t stack_bytes, life_n;      /* sizeof(struct ml_stack) (frames follow), lifetime buckets */
    uint32_t off[ML_OFF_N];            /* offsetof(struct ml_stack, …), ML_OFF_* order */
    uint32_t module_bytes, point_bytes;
    /* regions: file offsets and capacities (entries; bytes for the arena) */
    uint64_t modules_at, points_at, listed_at, arena_at;
    uint64_t modules_cap, points_cap, listed_cap, arena_cap;
    /* the process */
    int64_t pid, ppid;
    uint32_t uid, fork_child;
    uint64_t start_ns;                 /* CLOCK_REALTIME at start (or fork) */
    uint64_t start_ticks;              /* /proc/self/stat starttime: a reused pid is another process */
    char exe[1024];
    /* its end: a final dump (exit, fork-child-exit, exec) written as <MEMLENS_OUT>.<pid>.<seq>.raw */
    _Atomic uint32_t status;           /* ML_ST_* */
    uint32_t pad0;
    _Atomic uint64_t final_seq;
    /* configuration, as the runtime runs it */
    _Atomic uint64_t interval;
    _Atomic uint32_t active, unwinder, max_depth, max_stacks;
    /* counters (written by samplers, rarely: a line of their own) */
    _Alignas(64) _Atomic uint64_t truncated, dropped, unwind_fallbacks, dropped_bytes;
    _Atomic uint64_t table_full;       /* samples of new stacks a full table could not take */
    _Atomic uint64_t untracked;        /* samples counted as allocated whose block could not be
                                          tracked live (the range could not grow: ulimit -v) */
    /* the stack table: the arena's used bytes and the listed records (stacks.c) */
    _Alignas(64) _Atomic uint64_t arena_used;
    _Atomic uint32_t nstacks;
    _Atomic uint32_t nmodules;
    /* the views: the heap estimate and its peak (peak.c), the clock (clock.c), the timeline */
    _Alignas(64) _Atomic int64_t heap;
    int64_t heap_max, next_snap;
    uint64_t heap_max_tick;
    _Atomic uint64_t snap_heap, snap_ns;
    /* the two half-sample estimates (peak.c): each half's value, its highest, the other half's
     * value at that moment and the tick of it */
    int64_t half[2], half_max[2], half_other[2];
    uint64_t half_tick[2];
    _Atomic int32_t snapped, views_on;
    _Atomic uint64_t anchor_tsc;
    uint64_t anchor_ns, hz_start;
    /* a tick and the CLOCK_REALTIME ns it was read at, with the tick rate then (every timeline
     * point): ticks convert to times with them after the process is gone */
    _Atomic uint64_t clock_tsc, clock_ns, clock_hz;
    _Atomic uint32_t npoints, stats_kind;
    uint64_t period_ns;
    _Atomic int32_t dumped;            /* a dump was written (growth is measured from it) */
    uint32_t table_own;                /* the list and arena are this process's (0: a fork child
                                          that has not written to them: its parent's, read only) */
    _Atomic uint32_t dump_errno;       /* why the final dump could not be written (ENOSPC: a full
                                          filesystem); 0 none. The state then holds what fitted. */
};

/* Never NULL: the file's header, or (without a run directory, or when it cannot be used) the
 * same layout in private memory. */
extern struct ml_state *ml_st;
extern struct ml_state_module *ml_st_modules;
extern struct ml_state_point *ml_st_points;

/* stacks.c (from ml_init), once the configuration is read: map the state with room for a stack table of
 * `listed` entries and an arena of `arena` bytes; *listed_p and *arena_p point into it. 0 or -1
 * (then nothing is profiled). */
int ml_state_init(uint64_t listed, uint64_t arena, _Atomic uint32_t **listed_p, char **arena_p);
/* Make sure bytes [0, end) of the arena (or entries of the list) can be written: the file's pages
 * are reserved (fallocate) before they are touched, so a full filesystem drops samples instead of
 * killing the program with SIGBUS. 0 or -1. */
int ml_state_arena_room(uint64_t end);
int ml_state_listed_room(uint64_t entries);
int ml_state_modules_room(uint64_t entries);
int ml_state_points_room(uint64_t entries);
/* Fork child: its own file, mapped where the parent's was: the header and modules at once, the stack
 * table (a copy with the cumulative counts zeroed) at its first write. */
/* Before a fork, our locks held: the header as the child must start from. */
void ml_state_fork_prepare(void);
void ml_state_fork_child(void);
/* Before any write to the stack table (a sample, the free or realloc of a sampled block, a dump, a
 * reset): a fork child copies its parent's table first. One predictable branch on slow paths. */
extern _Atomic int ml_st_table_pending;
void ml_state_own_slow(void);
static inline void ml_state_own(void)
{
    if (unlikely(atomic_load_explicit(&ml_st_table_pending, memory_order_acquire)))
        ml_state_own_slow();
}
/* A fork child that has written nothing to its table has nothing of its own to dump. */
static inline int ml_state_table_inherited(void)
{
    return atomic_load_explicit(&ml_st_table_pending, memory_order_acquire);
}
/* The final dump of this image was written (seq), or taken back (a failed exec: seq = ~0), or the
 * image ended with nothing of its own to dump (ML_SEQ_NOTHING). */
void ml_state_final(uint64_t seq);
/* Is the state in a file that outlives us (a failed exit dump then loses nothing)? */
int ml_state_in_file(void);
/* The samplers' counters start over (a reset, a fork child). table_full stays: the table is as full
 * as it was. */
static inline void ml_state_zero_counters(void)
{
    atomic_store(&ml_st->truncated, 0);
    atomic_store(&ml_st->dropped, 0);
    atomic_store(&ml_st->dropped_bytes, 0);
    atomic_store(&ml_st->unwind_fallbacks, 0);
    atomic_store(&ml_st->untracked, 0);
}

#pragma GCC visibility pop
#endif
