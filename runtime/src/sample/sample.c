/* The slow path: what happens when a thread's byte countdown runs out.
 *
 * Sampling is a Poisson process over allocated bytes with mean interval R: the countdown is drawn
 * from Exp(R), so a block of s bytes is sampled with probability p = 1 - exp(-s/R); each sample then
 * carries weight 1/p, which makes the per-stack sums unbiased estimates of the true totals. */
#define _GNU_SOURCE
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <x86intrin.h>

#include "../control/ctl.h"
#include "sample.h"
#include "switch.h"

#define ARMED_EXACT UINT64_MAX

static uint64_t rng_next(struct ml_thread *t)
{
    uint64_t x = t->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* -ln(u) for u in (0, 1], on the sampled path once per sample, without a division and with a
 * shorter series (the chain of dependent operations is most of a draw): u = 2^e * m, m in [1, 2); m's top 6 bits pick c = the middle of
 * its 1/64 step, and ln m = ln c + ln(1 + r), r = (m - c) / c, |r| < 1/128, whose series to r^4 is
 * within 1e-9 of it (relative: a countdown off by a billionth). The tables are filled with libm's
 * log at the first draw (which may come before our constructor: an early malloc); racing threads
 * write the same values. */
#define LN_BITS 6
/* c, ln c and 1/c side by side, 32 bytes an entry: one cache line a draw (a sample is rare, and at
 * 64K its lines are often cold) */
static struct ln_entry {
    double c, ln, inv, pad_;
} ln_tab[1 << LN_BITS] __attribute__((aligned(64)));
static _Atomic int ln_ready;

static ML_NOINLINE void ln_tables(void)
{
    for (int k = 0; k < 1 << LN_BITS; k++) {
        struct ln_entry *t = &ln_tab[k];
        t->c = 1.0 + (k + 0.5) / (1 << LN_BITS);
        t->ln = log(t->c);
        t->inv = 1.0 / t->c;
    }
    atomic_store_explicit(&ln_ready, 1, memory_order_release);
}

static double neg_log(double u)
{
    uint64_t bits;
    memcpy(&bits, &u, sizeof bits);
    int e = (int)((bits >> 52) & 0x7ff) - 1023, k = (int)((bits >> (52 - LN_BITS)) & ((1 << LN_BITS) - 1));
    bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull; /* m in [1, 2) */
    double m;
    memcpy(&m, &bits, sizeof m);
    const struct ln_entry *t = &ln_tab[k];
    double r = (m - t->c) * t->inv;
    double series = r * (1.0 + r * (-0.5 + r * (1.0 / 3 - r * 0.25)));
    return -((double)e * 0.6931471805599453 + t->ln + series);
}

/* Bytes until the next sample, ~ Exp(mean R), at least 1. */
static int64_t draw(struct ml_thread *t, uint64_t R)
{
    if (unlikely(!atomic_load_explicit(&ln_ready, memory_order_acquire)))
        ln_tables();
    double u = (double)((rng_next(t) >> 11) + 1) * 0x1p-53; /* (0, 1]: normal, never 0 */
    double d = neg_log(u) * (double)R;
    return d > 4e18 ? (int64_t)4e18 : (int64_t)d + 1;
}

static void thread_setup(struct ml_thread *t)
{
    uint64_t seed = __rdtsc() ^ ((uintptr_t)t * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)gettid() << 32);
    t->rng = seed ? seed : 1;
}

int ml_slow_decide(size_t size)
{
    struct ml_thread *t = &ml_tls;
    if (t->busy)
        return ML_FORWARD; /* nested inside the runtime: leave the countdown alone */
    if (unlikely(!ml_cfg.ready)) {
        t->countdown = ML_POLL_BUDGET;
        t->armed = 0;
        return ML_FORWARD;
    }
    if (unlikely(atomic_load_explicit(&ml_cfg.ctl_pending, memory_order_relaxed)) && ml_ctl_child_poll)
        ml_ctl_child_poll();
    if (unlikely(!t->rng))
        thread_setup(t);
    if (unlikely(t->registered == ML_REG_NO))
        ml_thread_register(t);
    uint64_t e = atomic_load_explicit(&ml_epoch, memory_order_acquire);
    if (unlikely(atomic_load_explicit(&t->epoch, memory_order_relaxed) != e)) {
        /* A switch happened (and probably forced us here): acknowledge it and re-arm from scratch.
         * Redrawing is unbiased: the countdown is memoryless. */
        atomic_store_explicit(&t->epoch, e, memory_order_release);
        t->armed = 0;
    }
    uint64_t R = atomic_load_explicit(&ml_cfg.interval, memory_order_relaxed);
    if (!atomic_load_explicit(&ml_cfg.active, memory_order_relaxed)) {
        /* Inactive: come back after ~1 MiB to see whether someone switched us on. */
        t->countdown = ML_POLL_BUDGET;
        t->armed = 0;
        return ML_FORWARD;
    }
    if (R == 0) {
        t->countdown = 0; /* every allocation comes here */
        t->armed = ARMED_EXACT;
        t->samples++;
        return ML_EXACT;
    }
    if (t->armed != R) {
        /* The countdown was a poll budget or drawn for another interval: start a fresh process,
         * from this allocation on (skipping it would never sample a thread's first block, however
         * big: a bias of its whole size). */
        t->armed = R;
        t->countdown = draw(t, R);
        t->next = draw(t, R);
        if (t->countdown > (int64_t)size) {
            t->countdown -= (int64_t)size;
            return ML_FORWARD;
        }
    }
    /* The next countdown was drawn at the previous sample: the fast path's next subtract waits on
     * this store, and a draw (a division, a polynomial) on that path would stall it. */
    t->countdown = t->next;
    t->next = draw(t, R);
    t->samples += size != 0;
    return size ? ML_SAMPLE : ML_FORWARD;
}

void ml_weights(uint64_t size, uint64_t R, uint64_t *fx, uint64_t *bytes)
{
    double w = R ? 1.0 / -expm1(-(double)size / (double)R) : 1.0;
    *fx = (uint64_t)(w * 65536.0 + 0.5);
    *bytes = (uint64_t)(w * (double)size + 0.5);
}

uint64_t ml_draw(uint64_t R)
{
    struct ml_thread *t = &ml_tls;
    if (unlikely(!t->rng))
        thread_setup(t);
    return (uint64_t)draw(t, R);
}

double ml_uniform(void)
{
    struct ml_thread *t = &ml_tls;
    if (unlikely(!t->rng))
        thread_setup(t);
    return (double)((rng_next(t) >> 11) + 1) * 0x1p-53;
}

/* A fork child starts a sampling process of its own: with the parent's random state and countdown
 * every child would take the same decisions (all sampled, or none). The next allocation re-arms. */
void ml_sample_fork_child(void)
{
    struct ml_thread *t = &ml_tls;
    thread_setup(t);
    t->armed = 0;
    t->countdown = 0;
}
