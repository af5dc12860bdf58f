/* Entry hooks on functions already in memory (patch.c): a jump at a function's first instruction to
 * a stub, and a trampoline that runs the instructions the jump displaced and jumps back. Used by the
 * hooks on allocators linked into the program (hooks.c, finder.c). */
#ifndef MEMLENS_PATCH_H
#define MEMLENS_PATCH_H
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define ML_PATCH_MAX 16 /* bytes a patch may displace (the jump is 5; instructions are up to 15) */

/* One hooked entry point. The jump at `site` goes to a stub in a page near the module, which jumps
 * to `*target`: the hook while it counts, the trampoline once the hook is switched off (detach, or
 * a program that reports its allocations itself). `target` is written through a writable alias of
 * the stub page, so switching is one aligned store, with no change of protection and no stop. */
struct ml_patch {
    uintptr_t entry;          /* the function's address */
    uintptr_t site;           /* where the jump is written: entry, or after its endbr64 */
    uint8_t len;              /* bytes displaced from site (>= 5) */
    uint8_t old[ML_PATCH_MAX];  /* what was at site */
    uint8_t code[ML_PATCH_MAX]; /* what goes there: jmp rel32 to the stub, int3 for the rest */
    void *tramp;              /* the original function, relocated: call it to forward */
    void *_Atomic *target;    /* the stub's jump target (writable alias) */
    void *hook;
    void *guard;              /* instead of the hook while hooks do not count; NULL: the trampoline */
    uint8_t counts;           /* an allocating entry point (its hook counts); else a guard (free) */
    uint8_t *skip;            /* the countdown's on/off byte (writable alias), or NULL: ml_patch_sampling */
};

/* The hook's fast path, emitted in front of the trampoline for the shapes whose deciding argument
 * is in %rdi, so that the common call never reaches the C hook: */
enum {
    ML_FAST_NONE,
    ML_FAST_COUNT, /* an allocation of %rdi bytes: subq %rdi, %fs:tls_off (the thread's countdown) */
    ML_FAST_FREE,  /* a pointer in %rdi: is it in [*range_base, *range_base + *range_span)? */
};
struct ml_patch_fast {
    int kind;
    int32_t tls_off; /* ml_tls.countdown's offset from the thread pointer (initial-exec TLS) */
    const uintptr_t *range_base, *range_span;
};

/* Decode the first instructions of the function at `entry` (`size` bytes, from its symbol) with
 * Zydis, check that it can be hooked and build its trampoline and stub in a page near it. Returns
 * NULL, or why not (a phrase: "a call in its first 5 bytes"). Nothing is written at the site. */
const char *ml_patch_plan(struct ml_patch *p, uintptr_t entry, size_t size, void *hook,
                          const struct ml_patch_fast *fast);
/* Does the function at `entry` (`size` bytes) call or jump directly to one of `targets`? (An entry
 * point of an allocator that calls another one would otherwise be counted twice.) */
int ml_patch_calls_any(uintptr_t entry, size_t size, const uintptr_t *targets, int n);
/* 1 if the function at `entry` (`size` bytes) is plain instructions ending in a return: too short
 * to hook, it cannot hand a pointer to anything (a guard that need not be hooked). */
int ml_patch_inert(uintptr_t entry, size_t size);
/* Write p->code at p->site in this process (every other thread must be out of the way: before
 * main, or stopped). 0, or -1 with errno. */
int ml_patch_write(const struct ml_patch *p);
/* While sampling is off, an allocating entry point's fast path skips the countdown: the first
 * instruction of its check is `jmp` over it to the trampoline (0xeb), else `test $rel8, %al` (0xa8,
 * 2 bytes too, its only effect on flags the check sets again anyway). One byte, the opcode of a
 * 2-byte instruction whose operand stays, written through the writable alias: another thread running
 * that code meanwhile executes the one or the other, both of the same length, and either is right.
 * Nor is a serialization of the other cores needed (no membarrier SYNC_CORE, which Linux's own
 * multi-byte patching uses): a core that still runs the old byte for a moment is right as well —
 * switched off, its countdown leads to the slow path, which reads `active` and forwards; switched
 * on, it samples from its next pass, as a thread whose countdown was drawn before the switch does.
 * Why not a flag read by the check: any memory access in front of mimalloc's fast path costs its
 * pair ~3 ticks in the fast-path benchmark (docs/allocators.md), a jump costs nothing. */
static inline void ml_patch_sampling(const struct ml_patch *p, int on)
{
    if (p->skip)
        __atomic_store_n(p->skip, (uint8_t)(on ? 0xa8 : 0xeb), __ATOMIC_RELEASE);
}
/* Point the stub at `to` (the hook, or the trampoline). */
static inline void ml_patch_retarget(struct ml_patch *p, void *to)
{
    __atomic_store_n(p->target, to, __ATOMIC_RELEASE);
}

#pragma GCC visibility pop
#endif
