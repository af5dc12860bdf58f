/* The report API of memlens.h: a program with arenas or pools of its own (or a Rust GlobalAlloc
 * wrapper, crates/memlens-alloc) tells memlens what it hands out and takes back. The seam's model
 * (b), "observe" (source.h): sampled by the same countdown, recorded by address. */
#include "../base/log.h"
#include "../base/notes.h"
#include "finder.h"
#include "source.h"

#define RA() ((uintptr_t)__builtin_return_address(0))

static _Atomic int reported;

/* A program that reports its allocations itself may report what an allocator we hooked also
 * serves (memlens_alloc::Profiled<Jemalloc>): the hooks then stop counting, once, and say so. */
static ML_NOINLINE void first_report(void)
{
    if (atomic_exchange(&reported, 1))
        return;
    if (ml_hooks_count()) {
        ml_hooks_counting(0);
        ml_note(1, "memlens: the program reports its allocations itself (memlens_report_alloc): the hooks on "
                   "the allocators linked into it no longer count allocations, so none is counted twice");
    }
}

ML_EXPORT void memlens_report_alloc(void *ptr, size_t size)
{
    if (unlikely(!atomic_load_explicit(&reported, memory_order_relaxed)))
        first_report();
    ml_src_observe_alloc(ML_SRC_REPORTED, ptr, size, RA());
}

ML_EXPORT void memlens_report_free(void *ptr) { ml_src_observe_free(ML_SRC_REPORTED, ptr); }
