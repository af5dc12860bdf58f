/* The runtime's C unit tests: one file per runtime file (Perfetto heapprofd's way), each a list of
 * TEST()s run by main() below. crates/memlens-native/tests/cunit builds every `*_test.c` here with
 * the lower floors of the runtime (base, store, unwind, sample, record and the dump writer), with the
 * debug invariants (-DMEMLENS_DEBUG=1: every ML_ASSERT) and gcc's ASan and UBSan, and runs it from
 * `cargo test`. Run one by hand: `<binary> [test name...]`; `--list` names them.
 *
 * A failed CHECK prints its place, the expression and the values, and the test goes on (so one run
 * shows every broken property); the binary exits 1 if any failed. Tests that draw random numbers do
 * it from a fixed seed (unit_rng): a run is the same every time, so a statistical bound can be set
 * where it cannot flake. */
#ifndef MEMLENS_UNIT_H
#define MEMLENS_UNIT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define UNIT_MAX_TESTS 128

struct unit_test {
    const char *name;
    void (*fn)(void);
};
#define UNIT_USED __attribute__((unused))
static struct unit_test unit_tests[UNIT_MAX_TESTS] UNIT_USED;
static int unit_ntests UNIT_USED, unit_failed_checks UNIT_USED, unit_shown UNIT_USED;

UNIT_USED static void unit_register(const char *name, void (*fn)(void))
{
    if (unit_ntests < UNIT_MAX_TESTS)
        unit_tests[unit_ntests++] = (struct unit_test){name, fn};
}

/* TEST(name) { ... }: registered before main by a constructor (the order of the file). */
#define TEST(name)                                                                                     \
    static void name(void);                                                                            \
    __attribute__((constructor)) static void unit_reg_##name(void) { unit_register(#name, name); }     \
    static void name(void)

UNIT_USED static void unit_fail(const char *file, int line, const char *what)
{
    unit_failed_checks++;
    if (unit_shown++ < 30)
        fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what);
}

#define CHECK(c)                                                                                       \
    do {                                                                                               \
        if (!(c))                                                                                      \
            unit_fail(__FILE__, __LINE__, #c);                                                         \
    } while (0)

/* Equality of two integers, both shown when they differ. */
#define CHECK_EQ(a, b)                                                                                 \
    do {                                                                                               \
        uint64_t unit_a = (uint64_t)(a), unit_b = (uint64_t)(b);                                       \
        if (unit_a != unit_b) {                                                                        \
            char unit_m[1024];                                                                         \
            snprintf(unit_m, sizeof unit_m, "%.300s == %.300s (%" PRIu64 " / %" PRId64 " / 0x%" PRIx64         \
                     " vs %" PRIu64 " / %" PRId64 " / 0x%" PRIx64 ")", #a, #b, unit_a, (int64_t)unit_a, \
                     unit_a, unit_b, (int64_t)unit_b, unit_b);                                         \
            unit_fail(__FILE__, __LINE__, unit_m);                                                     \
        }                                                                                              \
    } while (0)

#define CHECK_STR(a, b)                                                                                \
    do {                                                                                               \
        const char *unit_a = (a), *unit_b = (b);                                                       \
        if (strcmp(unit_a, unit_b)) {                                                                  \
            char unit_m[2048];                                                                         \
            snprintf(unit_m, sizeof unit_m, "%.200s == %.200s (\"%.700s\" vs \"%.700s\")", #a, #b,     \
                     unit_a, unit_b);                                                                  \
            unit_fail(__FILE__, __LINE__, unit_m);                                                     \
        }                                                                                              \
    } while (0)

/* A double within [lo, hi], all three shown when it is not. */
#define CHECK_IN(x, lo, hi)                                                                            \
    do {                                                                                               \
        double unit_x = (x), unit_lo = (lo), unit_hi = (hi);                                           \
        if (!(unit_x >= unit_lo && unit_x <= unit_hi)) {                                               \
            char unit_m[1024];                                                                         \
            snprintf(unit_m, sizeof unit_m, "%.200s = %.9g, outside [%.9g, %.9g] (%.200s, %.200s)", #x, \
                     unit_x,                                                                           \
                     unit_lo, unit_hi, #lo, #hi);                                                      \
            unit_fail(__FILE__, __LINE__, unit_m);                                                     \
        }                                                                                              \
    } while (0)

/* A fixed-seed generator for the tests' own draws (xorshift64*), apart from the runtime's. */
struct unit_rng {
    uint64_t s;
};
static inline uint64_t unit_next(struct unit_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}
/* Uniform in [0, n), n > 0. */
static inline uint64_t unit_below(struct unit_rng *r, uint64_t n) { return unit_next(r) % n; }

UNIT_USED static double unit_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

UNIT_USED static int unit_wanted(int argc, char **argv, const char *name)
{
    int any = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        any = 1;
        if (!strcmp(argv[i], name))
            return 1;
    }
    return !any;
}

/* A file that needs its own main (a fuzzer's driver) defines UNIT_NO_MAIN. */
#ifndef UNIT_NO_MAIN
int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (int i = 0; i < unit_ntests; i++)
            printf("%s\n", unit_tests[i].name);
        return 0;
    }
    int ran = 0, failed = 0;
    for (int i = 0; i < unit_ntests; i++) {
        if (!unit_wanted(argc, argv, unit_tests[i].name))
            continue;
        int before = unit_failed_checks;
        double t0 = unit_seconds();
        unit_tests[i].fn();
        ran++;
        failed += unit_failed_checks != before;
        printf("%s %s (%.2f s)\n", unit_failed_checks != before ? "FAILED" : "ok", unit_tests[i].name,
               unit_seconds() - t0);
        fflush(stdout);
    }
    printf("%d tests, %d failed, %d failed checks\n", ran, failed, unit_failed_checks);
    return ran == 0 || failed ? 1 : 0;
}
#endif

#endif
