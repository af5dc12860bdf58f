/* The runtime's own account of its cost: what profiling has cost this process so far, measured in
 * production with no experiment (the direct cost; `memlens study` measures the total, paired).
 *
 * Timed: the sampled path — a sample's unwinding, its stack record, the views' bookkeeping and the
 * block served from the private range; the free and the realloc of a sampled block; an exact-mode
 * record. These are rare (one per ~R bytes): two TSC reads and two adds to the thread's own
 * counters are lost in the rest of a sample (~0.1-5 us). Two locked adds to shared counters
 * instead cost ~0.4 cycles per malloc/free pair at 64K in fastpath.sh (~50 per sample). The time includes the allocation the sampled path
 * replaces (tens of ns). Exact mode records every allocation: there one record in 64 is timed and
 * counted 64 times (timing each made the exact mode's malloc/free pair ~40% slower).
 *
 * Not timed: the unsampled fast path (a countdown subtract and a tail call; free's range compare).
 * Timing or counting it would add instructions to every malloc; the number of its calls is instead
 * estimated from the samples — each sample's weight 1/(1-exp(-s/R)) is the number of allocations
 * it stands for, the same unbiased estimate as a profile's alloc_objects — and its time is what the
 * paired study measures as the rest of the total. The re-arming of the countdown (one draw per
 * sample) is not timed either: a few ns.
 *
 * Waiting is not counted: the range lock is a spin lock that yields the CPU, and under load a
 * yield can last milliseconds (counted, it made the account of two threads sampling at 64K read
 * 30-70% of the CPU time in some blocks while the total overhead was 5%); range.c adds the wait to
 * the thread's `cost_wait`, which both ends of a stretch subtract. A preemption inside a stretch
 * (rarely: the sampled path is a few % of a thread's time) would add its milliseconds: a stretch
 * counts at most ML_COST_CAP_NS (200 us, ten times a slow sample's unwinding and recording), so a
 * preempted one over-counts by that much at most.
 *
 * Ticks become nanoseconds as they are added, at one rate per process: the views' calibration
 * (clock.c) when the first is added. Converting the total at each reading instead would let
 * the rate's refinement change the whole past, and a difference of two readings (the study's
 * per-block figure) would be mostly that change. */
#define _GNU_SOURCE
#include <time.h>

#include <pthread.h>

#include "../base/out.h"
#include "clock.h"
#include "cost.h"
#include "switch.h"

#define ML_COST_CAP_NS 200000u

static struct {
    /* Threads that left the registry (exited), or never got into it (a full registry): their
     * accounts. The running threads keep theirs in ml_tls (rt.h). */
    _Alignas(64) _Atomic uint64_t ns; /* time in the sampled path */
    _Atomic uint64_t calls_fx;        /* allocation calls it stands for, 16-bit fixed point */
    _Atomic uint64_t ns_per_tick_q32; /* the rate, 32-bit fixed point; 0 until the first event */
    char pad_[40];
} cost;

/* A fork child's CPU time starts at zero: so does its account (its one thread is the forking one). */
static void cost_child(void)
{
    atomic_store(&cost.ns, 0);
    atomic_store(&cost.calls_fx, 0);
    ml_tls.cost_ns = 0;
    ml_tls.cost_calls_fx = 0;
}

/* With the registry locked (switch.c): the thread leaves it, its account goes to the total. */
void ml_cost_thread_exit(struct ml_thread *t)
{
    atomic_fetch_add_explicit(&cost.ns, t->cost_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&cost.calls_fx, t->cost_calls_fx, memory_order_relaxed);
    t->cost_ns = t->cost_calls_fx = 0;
}

static void add_thread(struct ml_thread *t, void *arg)
{
    uint64_t *sum = arg;
    sum[0] += __atomic_load_n(&t->cost_ns, __ATOMIC_RELAXED);
    sum[1] += __atomic_load_n(&t->cost_calls_fx, __ATOMIC_RELAXED);
}

__attribute__((constructor(103))) static void cost_setup(void)
{
    pthread_atfork(NULL, NULL, cost_child);
}

void ml_cost_end(uint64_t t0, uint64_t calls_fx, uint64_t times)
{
    uint64_t t1 = __rdtsc() - ml_tls.cost_wait;
    uint64_t q = atomic_load_explicit(&cost.ns_per_tick_q32, memory_order_relaxed);
    if (unlikely(!q)) {
        uint64_t hz = ml_views_tsc_hz_rough();
        q = hz ? (uint64_t)(4294967296.0 * 1e9 / (double)hz) : 1; /* racing threads agree */
        atomic_store_explicit(&cost.ns_per_tick_q32, q, memory_order_relaxed);
    }
    uint64_t ns = (uint64_t)(((unsigned __int128)(t1 > t0 ? t1 - t0 : 0) * q) >> 32);
    ns = (ns < ML_COST_CAP_NS ? ns : ML_COST_CAP_NS) * times;
    struct ml_thread *t = &ml_tls;
    if (likely(t->registered == ML_REG_YES)) {
        /* single 8-byte stores, so a reader summing the registry never sees a torn value */
        __atomic_store_n(&t->cost_ns, t->cost_ns + ns, __ATOMIC_RELAXED);
        __atomic_store_n(&t->cost_calls_fx, t->cost_calls_fx + calls_fx * times, __ATOMIC_RELAXED);
        return;
    }
    atomic_fetch_add_explicit(&cost.ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&cost.calls_fx, calls_fx * times, memory_order_relaxed);
}

int ml_cost_get(uint64_t *sampled_ns, uint64_t *calls, uint64_t *cpu_ns)
{
    uint64_t sum[2] = {0, 0};
    *sampled_ns = *calls = *cpu_ns = 0;
    if (ml_threads_each(add_thread, sum) != 0)
        return -1;
    *sampled_ns = sum[0] + atomic_load_explicit(&cost.ns, memory_order_relaxed);
    *calls = (sum[1] + atomic_load_explicit(&cost.calls_fx, memory_order_relaxed)) >> 16;
    struct timespec ts;
    *cpu_ns = clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0
                  ? (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec
                  : 0;
    return 0;
}

void ml_cost_write(struct ml_out *o)
{
    uint64_t ns, calls, cpu;
    if (ml_cost_get(&ns, &calls, &cpu) != 0)
        return;
    ml_out_str(o, "cost_ns ");
    ml_out_u64(o, ns);
    ml_out_str(o, "\ncost_calls ");
    ml_out_u64(o, calls);
    ml_out_str(o, "\ncpu_ns ");
    ml_out_u64(o, cpu);
    ml_out_str(o, "\n");
}
