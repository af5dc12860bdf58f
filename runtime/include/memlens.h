/* memlens.h — control the memlens heap profiler from inside your own program.
 *
 * The profiler runtime (libmemlens.so) is normally injected with `memlens run -- PROG`; your program is
 * not linked against it. These functions are therefore meant to be reached in one of two ways, both
 * harmless when the runtime is not loaded:
 *
 * 1. Weak symbols (simplest; needs a position-independent executable, the default of Debian's gcc):
 *
 *        #define MEMLENS_WEAK
 *        #include <memlens.h>
 *        ...
 *        if (memlens_start) memlens_start();        // null when the runtime is not loaded
 *        if (memlens_dump) memlens_dump("/tmp/before-batch.raw");
 *
 *    With MEMLENS_WEAK every declaration below is weak: the dynamic linker fills it in when
 *    libmemlens.so is preloaded and leaves it null otherwise. Always test the pointer first.
 *    (A non-PIE executable resolves undefined weak functions to null at link time: use pattern 2.)
 *
 * 2. dlsym, for any executable or from a plug-in:
 *
 *        #include <dlfcn.h>
 *        int (*start)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "memlens_start");
 *        if (start) start();
 *
 * All functions are thread-safe, never allocate through malloc and may be called at any time after the
 * program's main() has started. A switch (memlens_start, memlens_stop, memlens_set_interval) reaches
 * every thread at its next allocation: the call forces each thread's byte countdown to zero and waits
 * (at most 50 us) until the threads that are allocating have acknowledged it. The fast path itself
 * still reads no shared state.
 */
#ifndef MEMLENS_H
#define MEMLENS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MEMLENS_BUILDING)
#define MEMLENS_API __attribute__((visibility("default")))
#elif defined(MEMLENS_WEAK)
#define MEMLENS_API __attribute__((weak))
#else
#define MEMLENS_API
#endif

/* What memlens_status() reports. Counts are since the runtime started or since the last reset. */
struct memlens_status {
    int active;             /* 1 while sampling, 0 when loaded but inactive */
    uint64_t interval;      /* mean sampling interval in bytes; 0 = exact mode (every allocation) */
    uint64_t samples;       /* samples recorded */
    uint64_t alloc_bytes;   /* estimated bytes allocated (unbiased: the sum of the samples' weights) */
    uint64_t stacks;        /* distinct stacks in the stack table */
    uint64_t truncated;     /* samples whose stack was cut at the depth limit or a broken frame chain */
    uint64_t dropped;       /* samples lost because a table was full */
};

/* Switch sampling on. Returns the previous state (1 active, 0 inactive). */
MEMLENS_API int memlens_start(void);

/* Switch sampling off; what was recorded stays and is dumped at exit. Returns the previous state. */
MEMLENS_API int memlens_stop(void);

/* Write a raw dump to `path` (created, never overwritten; convert it with
 * `memlens report PATH` or `memlens ctl`). With path == NULL the dump goes to the next numbered file
 * of the run's output (`memlens run -o`). Returns 0 or a negative errno
 * (-EEXIST: path exists; -EINVAL: path is NULL and the run has no output prefix). */
MEMLENS_API int memlens_dump(const char *path);

/* Set the mean sampling interval in bytes (0 = record every allocation). Returns 0. */
MEMLENS_API int memlens_set_interval(size_t bytes);

/* Fill *st. Returns 0, or -EINVAL if st is NULL. */
MEMLENS_API int memlens_status(struct memlens_status *st);

/* Zero the cumulative (alloc) counts and the sample totals, so that the next dump covers only what
 * is allocated from now on (live blocks sampled before stay, so their frees still balance). Returns 0. */
MEMLENS_API int memlens_reset(void);

/* Samples taken by the calling thread since it started (never reset): one TLS read. A program can
 * compare it before and after a piece of work to know whether the profiler sampled inside it. */
MEMLENS_API uint64_t memlens_thread_samples(void);

/* What the last switch did (memlens_start, memlens_stop, memlens_set_interval). */
struct memlens_switch {
    uint64_t threads; /* threads it reached (those that have allocated at least once) */
    uint64_t pending; /* of them, allocating but not yet switched when the call returned (normally 0) */
    uint64_t ns;      /* time the call spent forcing the threads over */
};

/* Fill *sw. Returns 0, or -EINVAL if sw is NULL. */
MEMLENS_API int memlens_last_switch(struct memlens_switch *sw);

/* What profiling has cost this process so far, by the runtime's own account (never reset). */
struct memlens_cost {
    uint64_t sampled_ns; /* time in the sampled path: unwinding, recording, the views, sampled frees */
    uint64_t calls;      /* allocation calls while sampling, estimated from the samples' weights */
    uint64_t cpu_ns;     /* the process's CPU time so far (CLOCK_PROCESS_CPUTIME_ID) */
};

/* Fill *c. Returns 0, -EINVAL if c is NULL, or -EAGAIN if the threads' accounts could not be
 * read just now (a switch held their registry for over a millisecond). */
MEMLENS_API int memlens_cost(struct memlens_cost *c);

/* Report memory your program hands out from arenas or pools of its own (memlens sees only what goes
 * through an allocator): `size` bytes at `ptr` were allocated; `ptr` is freed. Sampled by the same
 * byte countdown as malloc, so a report costs a subtraction unless it is sampled; a free costs one
 * load unless a reported block is live. NULL is ignored, a pointer never reported is ignored by
 * memlens_report_free. Stacks start at the caller of memlens_report_alloc. Once a program reports,
 * the hooks memlens put on allocators linked into it stop counting (the reports would count the
 * same memory twice). In Rust, crates/memlens-alloc wraps any GlobalAlloc with these. */
MEMLENS_API void memlens_report_alloc(void *ptr, size_t size);
MEMLENS_API void memlens_report_free(void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* MEMLENS_H */
