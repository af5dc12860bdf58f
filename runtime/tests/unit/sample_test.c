/* sample/sample.c: the Poisson countdown and a sample's weights, checked statistically.
 *
 * The runtime's draws come from this thread's xorshift state (ml_tls.rng), which the tests seed
 * before the first slow path (thread_setup only seeds a zero state): every run takes the same
 * decisions, so a bound cannot flake. The bounds are still set where a correct sampler passes for
 * any seed (five standard deviations; the Kolmogorov-Smirnov bound at a level of 0.1%), so a change
 * that breaks one is a real change of the distribution, not an unlucky seed. */
#include <math.h>

#include "../../src/sample/sample.h"
#include "../../src/sample/switch.h"
#include "unit.h"

#define R_DEFAULT 524288u

static void seed(uint64_t s)
{
    ml_tls.rng = s;
    ml_tls.armed = 0;
    ml_tls.countdown = 0;
    ml_tls.busy = 0;
}

static void configure(uint64_t interval, int active)
{
    ml_cfg.ready = 1;
    atomic_store(&ml_cfg.interval, interval);
    atomic_store(&ml_cfg.active, active);
}

/* One allocation as the fast path sees it (ML_COUNTDOWN_OR: subtract, slow path when <= 0); what
 * the slow path decided, or ML_FORWARD when it was not taken. */
static int allocate(uint64_t size)
{
    ml_tls.countdown -= (int64_t)size;
    if (ml_tls.countdown > 0)
        return ML_FORWARD;
    return ml_slow_decide(size);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The countdown's draws follow Exp(R): the mean, the Kolmogorov-Smirnov distance to the
 * exponential distribution, and both tails (where a poor logarithm shows first). */
TEST(draws_follow_the_exponential_distribution)
{
    const int n = 400000;
    static double d[400000];
    for (int k = 0; k < 3; k++) {
        uint64_t R = (uint64_t[]){R_DEFAULT, 4096, 1ull << 36}[k];
        seed(0x9E3779B97F4A7C15ull + (uint64_t)k);
        double sum = 0;
        uint64_t min = UINT64_MAX;
        for (int i = 0; i < n; i++) {
            uint64_t v = ml_draw(R);
            min = v < min ? v : min;
            d[i] = (double)v;
            sum += d[i];
        }
        CHECK(min >= 1);
        double mean = sum / n, sigma = (double)R / sqrt(n);
        CHECK_IN(mean, (double)R - 5 * sigma, (double)R + 5 * sigma);
        qsort(d, (size_t)n, sizeof *d, cmp_double);
        double ks = 0;
        int tiny = 0, huge = 0;
        for (int i = 0; i < n; i++) {
            /* draws are floor(E) + 1: compare E's distribution at the draw's lower edge */
            double f = -expm1(-(d[i] - 1) / (double)R);
            double lo = fabs(f - (double)i / n), hi = fabs(f - (double)(i + 1) / n);
            ks = fmax(ks, fmax(lo, hi));
            tiny += d[i] - 1 < (double)R / 1000;
            huge += d[i] - 1 >= 10.0 * (double)R;
        }
        CHECK_IN(ks, 0, 1.95 / sqrt(n)); /* KS critical value at alpha = 0.001 */
        double p_tiny = -expm1(-1.0 / 1000), p_huge = exp(-10.0);
        CHECK_IN(tiny, n * p_tiny - 5 * sqrt(n * p_tiny), n * p_tiny + 5 * sqrt(n * p_tiny));
        CHECK_IN(huge, n * p_huge - 5 * sqrt(n * p_huge), n * p_huge + 5 * sqrt(n * p_huge));
    }
}

/* A block of s bytes is sampled with probability 1 - exp(-s/R), whatever came before it: the
 * countdown is a Poisson process over allocated bytes, re-armed with a fresh draw at each sample. */
TEST(blocks_are_sampled_with_probability_one_minus_exp)
{
    const uint64_t R = 65536;
    const uint64_t sizes[] = {8, 64, 1000, R / 2, R, 4 * R};
    configure(R, 1);
    for (int k = 0; k < 6; k++) {
        uint64_t s = sizes[k];
        seed(1000 + (uint64_t)k);
        const int n = s < 1000 ? 2000000 : 200000;
        int sampled = 0;
        for (int i = 0; i < n; i++)
            sampled += allocate(s) == ML_SAMPLE;
        double p = -expm1(-(double)s / R), sd = sqrt(n * p * (1 - p));
        CHECK_IN(sampled, n * p - 5 * sd - 1, n * p + 5 * sd + 1);
    }
    /* A mix of sizes in one stream: each size class at its own rate. */
    seed(77);
    struct unit_rng r = {5};
    int n[4] = {0}, hit[4] = {0};
    const uint64_t mix[4] = {16, 4096, R, 8 * R};
    for (int i = 0; i < 1000000; i++) {
        int c = (int)unit_below(&r, 4);
        n[c]++;
        hit[c] += allocate(mix[c]) == ML_SAMPLE;
    }
    for (int c = 0; c < 4; c++) {
        double p = -expm1(-(double)mix[c] / R), sd = sqrt(n[c] * p * (1 - p));
        CHECK_IN(hit[c], n[c] * p - 5 * sd - 1, n[c] * p + 5 * sd + 1);
    }
}

/* The weight 1/p, p = 1 - exp(-s/R), in 16.16 fixed point and as bytes: values computed
 * independently (50 digits, mpmath) and rounded to the nearest. */
TEST(weights_are_one_over_the_sampling_probability)
{
    static const struct {
        uint64_t s, R, fx, bytes;
    } want[] = {
        {524288, 524288, 103676, 829411},      /* s = R: 1/(1 - 1/e) */
        {1, 524288, 34359771136ull, 524289},   /* tiny: ~R/s + 1/2 */
        {4096, 524288, 8421419, 526339},
        {1000000, 4096, 65536, 1000000},      /* s >> R: always sampled, weight 1 */
        {3, 7, 188019, 9},
        {65536, 196608, 231193, 231193},
        {12345, 0, 65536, 12345},             /* exact mode: every allocation, weight 1 */
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        uint64_t fx, bytes;
        ml_weights(want[i].s, want[i].R, &fx, &bytes);
        CHECK_EQ(fx, want[i].fx);
        CHECK_EQ(bytes, want[i].bytes);
    }
    /* decreasing in s towards 1, never below it */
    uint64_t last = UINT64_MAX;
    for (uint64_t s = 1; s < (1ull << 40); s = s * 3 / 2 + 1) {
        uint64_t fx, bytes;
        ml_weights(s, R_DEFAULT, &fx, &bytes);
        CHECK(fx <= last && fx >= 65536 && bytes >= s);
        last = fx;
    }
}

/* Summed over the samples, the weights estimate the bytes and objects allocated without bias: the
 * estimate lands within five standard deviations of the truth, the variance being
 * sum s^2 (1-p)/p over the allocations (and sum (1-p)/p for objects). */
TEST(weighted_samples_estimate_bytes_and_objects)
{
    const uint64_t R = R_DEFAULT;
    configure(R, 1);
    seed(31337);
    struct unit_rng r = {99};
    double true_bytes = 0, est_bytes = 0, var_bytes = 0, est_objs = 0, var_objs = 0;
    const int n = 3000000;
    int samples = 0;
    for (int i = 0; i < n; i++) {
        /* from 1 B to 8 MiB, most of them small */
        uint64_t s = 1 + (unit_next(&r) >> (64 - 23)) / (1 + unit_below(&r, 1u << 12));
        true_bytes += (double)s;
        double p = -expm1(-(double)s / R);
        var_bytes += (double)s * (double)s * (1 - p) / p;
        var_objs += (1 - p) / p;
        if (allocate(s) == ML_SAMPLE) {
            uint64_t fx, bytes;
            ml_weights(s, R, &fx, &bytes);
            est_bytes += (double)bytes;
            est_objs += (double)fx / 65536;
            samples++;
        }
    }
    /* + rounding: each sample's weights are rounded to the nearest unit */
    double round_b = samples * 0.5, round_o = samples * 0.5 / 65536;
    CHECK(samples > 1000);
    CHECK_IN(est_bytes, true_bytes - 5 * sqrt(var_bytes) - round_b, true_bytes + 5 * sqrt(var_bytes) + round_b);
    CHECK_IN(est_objs, n - 5 * sqrt(var_objs) - round_o, n + 5 * sqrt(var_objs) + round_o);
    printf("  bytes: %.0f estimated, %.0f true (%.3f sd); objects: %.0f estimated, %d true (%.3f sd); %d samples\n",
           est_bytes, true_bytes, (est_bytes - true_bytes) / sqrt(var_bytes), est_objs, n,
           (est_objs - n) / sqrt(var_objs), samples);
}

TEST(exact_mode_records_every_allocation)
{
    configure(0, 1);
    seed(1);
    for (int i = 0; i < 1000; i++) {
        CHECK_EQ(allocate((uint64_t)i + 1), ML_EXACT);
        CHECK_EQ(ml_tls.countdown, 0); /* every allocation comes back */
    }
}

/* Inactive: nothing is sampled, and the thread looks at the switch again after ~1 MiB. */
TEST(inactive_forwards_and_polls_every_mib)
{
    configure(4096, 0);
    seed(2);
    int slow = 0;
    for (int i = 0; i < 4096; i++) {
        int64_t before = ml_tls.countdown;
        CHECK_EQ(allocate(1024), ML_FORWARD);
        if (before - 1024 <= 0) {
            slow++;
            CHECK_EQ(ml_tls.countdown, ML_POLL_BUDGET);
        }
    }
    CHECK_EQ(slow, 4); /* 4 MiB allocated: the first call, then one poll per MiB */
}

/* Inside the runtime (busy), an allocation is forwarded and the countdown left as it is. */
TEST(busy_thread_forwards_and_keeps_its_countdown)
{
    configure(4096, 1);
    seed(3);
    ml_tls.busy = 1;
    ml_tls.countdown = -5;
    CHECK_EQ(ml_slow_decide(100), ML_FORWARD);
    CHECK_EQ(ml_tls.countdown, -5);
    ml_tls.busy = 0;
}

/* The fast switch: a kick zeroes the countdown of every registered thread, whose next allocation
 * re-arms for the new interval (and samples at the new rate from then on). */
TEST(switch_rearms_for_the_new_interval)
{
    configure(1u << 30, 1);
    seed(4);
    CHECK_EQ(allocate(8), ML_FORWARD); /* registers this thread, arms for 1 GiB */
    CHECK_EQ(ml_tls.armed, 1u << 30);
    atomic_store(&ml_cfg.interval, 4096);
    ml_switch_kick();
    CHECK_EQ(ml_tls.countdown, 0);
    allocate(8);
    CHECK_EQ(ml_tls.armed, 4096);
    int sampled = 0, n = 200000;
    for (int i = 0; i < n; i++)
        sampled += allocate(512) == ML_SAMPLE;
    double p = -expm1(-512.0 / 4096), sd = sqrt(n * p * (1 - p));
    CHECK_IN(sampled, n * p - 5 * sd, n * p + 5 * sd);
}

/* The first allocation of a thread is sampled like any other (not skipped: a thread that makes one
 * huge allocation would never be seen). */
TEST(a_threads_first_block_can_be_sampled)
{
    configure(4096, 1);
    int sampled = 0;
    for (int i = 0; i < 2000; i++) {
        seed(10000 + (uint64_t)i);
        sampled += allocate(1u << 20) == ML_SAMPLE; /* p = 1 - e^-256 */
    }
    CHECK_EQ(sampled, 2000);
}

TEST(fork_child_draws_a_state_of_its_own)
{
    seed(12345);
    ml_tls.armed = 4096;
    ml_tls.countdown = 777;
    ml_sample_fork_child();
    CHECK(ml_tls.rng != 12345 && ml_tls.rng != 0);
    CHECK_EQ(ml_tls.armed, 0);
    CHECK_EQ(ml_tls.countdown, 0);
}
