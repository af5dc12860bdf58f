/* The OpenTelemetry memory design's USDT probes (opentelemetry-ebpf-profiler, design-docs/
 * 00003-memory-profiling, "USDT contract"): provider otel_memory,
 *   alloc(void *ptr, uint64_t size, uint64_t weight)  on every sampled allocation,
 *   free(void *ptr)                                   on the free of a block alloc announced,
 * weight being the unbiased bytes the sample stands for (the profile's alloc_space adds the same).
 *
 * sys/sdt.h makes each probe a single `nop` plus an ELF note (.note.stapsdt) naming its address and
 * where its arguments are; a tracer attaching turns the nop into a breakpoint. Nothing is compiled
 * in when nobody is attached, so there is no semaphore to test. Each probe sits alone at the start
 * of a function of its own, never inlined: one note per probe (a tracer attaches once), and its
 * arguments are still in the registers the SysV ABI passed them in (%rdi, %rsi, %rdx), which is
 * where the design's first implementation reads them, whether or not it decodes the note's
 * argument descriptors. Only the sampled path calls these: the unsampled fast path is unchanged. */
#define _GNU_SOURCE
#include <sys/sdt.h>

#include "../base/rt.h"
#include "usdt.h"

ML_NOINLINE void ml_usdt_alloc(void *p, uint64_t size, uint64_t weight)
{
    STAP_PROBE3(otel_memory, alloc, p, size, weight);
}

ML_NOINLINE void ml_usdt_free(void *p) { STAP_PROBE1(otel_memory, free, p); }
