/* A fuzzer for the CFI parser and interpreter (unwind/cfi.c, through ml_cfi_rule_from): arbitrary
 * bytes as an object's .eh_frame_hdr, CIEs and FDEs must give a well-formed rule (valid or
 * unsupported, a valid frame's CFA above the return address), never a read outside the bytes
 * (ASan: each input is copied into a buffer of exactly its size), never undefined behaviour
 * (UBSan) and never a hang (an alarm per input).
 *
 * Built by crates/memlens-native/tests/cunit with ASan and UBSan and run from `cargo test` for a
 * bounded number of inputs from a fixed seed. By hand, longer:
 *     cfi_fuzz --seconds 600 --seed $RANDOM       (inputs until the time is up)
 *     cfi_fuzz crash-input.bin                     (replay one input)
 * An input that fails is written to $CFI_FUZZ_OUT (default ./cfi-fuzz-failure.bin) first.
 * The entry point is libFuzzer's, so clang users can also build it with -fsanitize=fuzzer,address
 * and -DUNIT_LIBFUZZER.
 *
 * Inputs: the first 4 bytes are the return address (an offset from the tables' start), the rest are
 * the tables. The driver makes them two ways: random bytes, and well-formed tables with random CFA
 * programs (cfi_build.h) mutated a few bytes, words or lengths at a time, so most inputs reach the
 * interpreter rather than stopping at the header. */
#define _GNU_SOURCE
#define UNIT_NO_MAIN
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "../../src/unwind/cfi.h"
#include "cfi_build.h"
#include "unit.h"

static const uint8_t *cur;
static size_t cur_len;
static uint64_t n_valid, n_outermost, n_unsupported;

/* Write the input being run where the user can replay it. */
static void save_input(void)
{
    const char *out = getenv("CFI_FUZZ_OUT");
    int fd = open(out ? out : "cfi-fuzz-failure.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0 && cur) {
        ssize_t w = write(fd, cur, cur_len);
        (void)w;
    }
    if (fd >= 0)
        close(fd);
    static const char msg[] = "cfi_fuzz: the failing input is in $CFI_FUZZ_OUT (cfi-fuzz-failure.bin)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "cfi_fuzz: an input ran for 10 s: a hang\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    save_input();
    abort();
}

/* The sanitizers call this before they end the process on an error. */
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    cur = data;
    cur_len = size;
    uint32_t off;
    memcpy(&off, data, 4);
    size_t n = size - 4;
    uint8_t *t = malloc(n ? n : 1); /* exactly the tables: a read past them is an ASan error */
    memcpy(t, data + 4, n);
    uint64_t r = ml_cfi_rule_from(t, t, t + n, (uintptr_t)t + off);
    free(t);
    int valid = (r & ML_RULE_VALID) != 0, unsupported = (r & ML_RULE_UNSUPPORTED) != 0;
    if (valid == unsupported || (valid && !(r & ML_RULE_OUTERMOST) && ml_rule_cfa_off(r) < 8) ||
        (unsupported && r != ML_RULE_UNSUPPORTED)) {
        fprintf(stderr, "cfi_fuzz: malformed rule 0x%llx\n", (unsigned long long)r);
        save_input();
        abort();
    }
    n_valid += valid && !(r & ML_RULE_OUTERMOST);
    n_outermost += valid && (r & ML_RULE_OUTERMOST);
    n_unsupported += unsupported;
    return 0;
}

#ifndef UNIT_LIBFUZZER

/* ---- the driver: inputs from a seed ---- */

static uint8_t pick_reg(struct unit_rng *r)
{
    static const uint8_t regs[] = {6, 7, 16, 6, 7, 16, 3, 12, 0, 63};
    return regs[unit_below(r, sizeof regs)];
}

static uint64_t pick_value(struct unit_rng *r)
{
    switch (unit_below(r, 8)) {
    case 0:
        return unit_next(r);
    case 1:
        return unit_below(r, 1u << 20);
    default:
        return unit_below(r, 64);
    }
}

/* The instructions a compiler emits for the frames the unwinder follows (the clean programs). */
static const uint8_t clean_ops[] = {0x00, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x0a, 0x0b, 0x0c,
                                    0x0d, 0x0e, 0x11, 0x12, 0x13, 0x2e, 0x10, 0x14};

/* A random CFA program of `ops` instructions: with `clean`, the forms gcc emits for frames the
 * unwinder follows (CFA in rsp or rbp, rbp saved, other registers anywhere); otherwise any of the
 * forms the interpreter knows and a few it does not, on any register. */
static size_t random_program(struct unit_rng *r, uint8_t *buf, int ops, int clean)
{
    struct cb b = {.buf = buf};
    for (int i = 0; i < ops && b.n < 200; i++) {
        uint8_t op = clean ? clean_ops[unit_below(r, sizeof clean_ops)] : (uint8_t)unit_below(r, 0x30);
        if (clean) {
            switch (op) {
            case 0x0c: /* def_cfa rsp|rbp, a small positive offset */
                cb_u8(&b, op);
                cb_uleb(&b, unit_below(r, 2) ? 6 : 7);
                cb_uleb(&b, 8 * (1 + unit_below(r, 16)));
                continue;
            case 0x0d:
                cb_u8(&b, op);
                cb_uleb(&b, unit_below(r, 2) ? 6 : 7);
                continue;
            case 0x0e:
                cb_u8(&b, op);
                cb_uleb(&b, 8 * (1 + unit_below(r, 16)));
                continue;
            case 0x05: case 0x11: case 0x06: case 0x07: case 0x10: case 0x14: /* never the ra */
                cb_u8(&b, op);
                cb_uleb(&b, unit_below(r, 2) ? 6 : 3 + unit_below(r, 10));
                if (op == 0x05 || op == 0x14)
                    cb_uleb(&b, 1 + unit_below(r, 8));
                else if (op == 0x11)
                    cb_sleb(&b, -(int64_t)unit_below(r, 8));
                else if (op == 0x10) {
                    cb_uleb(&b, 1);
                    cb_u8(&b, 0x30);
                }
                continue;
            default:
                break;
            }
        }
        switch (unit_below(r, clean ? 12 : 6)) {
        case 0: /* the packed forms: advance, offset (rbp, in a clean program), restore */
            cb_u8(&b, (uint8_t)(0x40 | unit_below(r, 64)));
            continue;
        case 1:
            cb_u8(&b, (uint8_t)(0x80 | (clean ? 6 : pick_reg(r))));
            cb_uleb(&b, clean ? 1 + unit_below(r, 8) : pick_value(r));
            continue;
        case 2:
            cb_u8(&b, (uint8_t)(0xc0 | (clean ? 6 : pick_reg(r))));
            continue;
        default:
            break;
        }
        cb_u8(&b, op);
        switch (op) {
        case 0x02:
            cb_u8(&b, (uint8_t)unit_next(r));
            break;
        case 0x03:
            cb_u8(&b, (uint8_t)unit_next(r));
            cb_u8(&b, (uint8_t)unit_below(r, 4));
            break;
        case 0x04:
            cb_u32(&b, (uint32_t)unit_below(r, 1u << 18));
            break;
        case 0x05: case 0x09: case 0x0c: case 0x14:
            cb_uleb(&b, pick_reg(r));
            cb_uleb(&b, pick_value(r));
            break;
        case 0x11: case 0x12: case 0x15:
            cb_uleb(&b, pick_reg(r));
            cb_sleb(&b, (int64_t)pick_value(r) - 32);
            break;
        case 0x06: case 0x07: case 0x08: case 0x0d:
            cb_uleb(&b, pick_reg(r));
            break;
        case 0x0e: case 0x2e:
            cb_uleb(&b, pick_value(r));
            break;
        case 0x13:
            cb_sleb(&b, (int64_t)pick_value(r) - 32);
            break;
        case 0x10: case 0x16: {
            cb_uleb(&b, pick_reg(r));
            uint64_t len = unit_below(r, 6);
            cb_uleb(&b, unit_below(r, 16) ? len : pick_value(r)); /* sometimes a lying length */
            for (uint64_t k = 0; k < len; k++)
                cb_u8(&b, (uint8_t)unit_next(r));
            break;
        }
        default: /* nop, remember/restore_state, and ops it does not follow */
            break;
        }
    }
    return b.n;
}

static const char *const augs[] = {"zR", "zR", "zR", "zRS", "zPLR", "", "eh", "zRL"};

/* Well-formed tables (1-5 FDEs with random programs); *target: an address inside one of them. */
static size_t seed_tables(struct unit_rng *r, uint8_t *buf, uintptr_t *target)
{
    uint8_t init[256], prog[256];
    int clean = unit_below(r, 3) != 0;
    size_t ni = random_program(r, init, (int)unit_below(r, 4), clean);
    int nfde = 1 + (int)unit_below(r, 5);
    struct cb b;
    cb_begin(&b, buf, nfde, clean ? "zR" : augs[unit_below(r, 8)], init, ni);
    uintptr_t code = (uintptr_t)buf + 0x10000;
    for (int i = 0; i < nfde; i++) {
        uint32_t len = 1 + (uint32_t)unit_below(r, 300);
        size_t np = random_program(r, prog, (int)unit_below(r, 24), clean);
        cb_fde(&b, code, len, prog, np);
        if (i == 0 || unit_below(r, 2))
            *target = code + unit_below(r, len + 2);
        code += len + unit_below(r, 64);
    }
    cb_finish(&b);
    return b.n;
}

/* A few mutations: bytes, 32-bit words (the lengths and offsets live there), cuts, inserts. */
static size_t mutate(struct unit_rng *r, uint8_t *buf, size_t n, size_t cap)
{
    int k = 1 + (int)unit_below(r, 4);
    static const uint32_t words[] = {0, 1, 4, 8, 0x7fffffff, 0x80000000u, 0xfffffff0u, 0xffffffffu};
    for (int i = 0; i < k && n; i++) {
        size_t at = unit_below(r, n);
        switch (unit_below(r, 6)) {
        case 0:
            buf[at] ^= (uint8_t)(1u << unit_below(r, 8));
            break;
        case 1:
            buf[at] = (uint8_t[]){0, 0xff, 0x7f, 0x80, 0x40, 0x0b}[unit_below(r, 6)];
            break;
        case 2:
            if (at + 4 <= n) {
                uint32_t w = unit_below(r, 2) ? words[unit_below(r, 8)] : (uint32_t)unit_below(r, (uint64_t)n + 16);
                memcpy(buf + at, &w, 4);
            }
            break;
        case 3:
            n = at; /* cut */
            break;
        case 4:
            if (n < cap) { /* insert a byte */
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = (uint8_t)unit_next(r);
                n++;
            }
            break;
        default: { /* delete a few */
            size_t d = 1 + unit_below(r, 8);
            if (at + d <= n) {
                memmove(buf + at, buf + at + d, n - at - d);
                n -= d;
            }
        }
        }
    }
    return n;
}

/* One input from the generator into `in` (4 bytes of return address, then the tables). */
static size_t generate(struct unit_rng *r, uint8_t *in, size_t cap)
{
    uint8_t *tables = in + 4;
    uintptr_t target = 0;
    size_t n;
    if (unit_below(r, 5) == 0) { /* random bytes, sometimes behind a plausible header */
        n = unit_below(r, 512);
        for (size_t i = 0; i < n; i++)
            tables[i] = (uint8_t)unit_next(r);
        if (n >= 4 && unit_below(r, 2))
            memcpy(tables, "\x01\x1b\x03\x3b", 4);
        target = (uintptr_t)tables + unit_below(r, 1u << 17);
    } else {
        n = seed_tables(r, tables, &target);
        if (unit_below(r, 2))
            n = mutate(r, tables, n, cap - 4);
    }
    uint32_t off = (uint32_t)(target - (uintptr_t)tables + 1);
    memcpy(in, &off, 4);
    return n + 4;
}

static int replay(const char *path)
{
    static uint8_t in[CB_MAX + 4];
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        return 2;
    }
    ssize_t n = read(fd, in, sizeof in);
    close(fd);
    alarm(10);
    LLVMFuzzerTestOneInput(in, n > 0 ? (size_t)n : 0);
    alarm(0);
    printf("%s: rule computed, no error\n", path);
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t iterations = 200000, seed = 1;
    double seconds = 0;
    int files = 0;
    signal(SIGALRM, on_alarm);
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(save_input);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iterations") && i + 1 < argc)
            iterations = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = strtod(argv[++i], NULL), iterations = UINT64_MAX;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (replay(argv[i]) == 0)
            files++;
        else
            return 2;
    }
    if (files)
        return 0;
    struct unit_rng r = {seed * 0x9E3779B97F4A7C15ull + 7};
    static uint8_t in[CB_MAX + 4];
    double t0 = unit_seconds();
    uint64_t i;
    for (i = 0; i < iterations; i++) {
        if (seconds > 0 && i % 1024 == 0 && unit_seconds() - t0 > seconds)
            break;
        size_t n = generate(&r, in, sizeof in);
        alarm(10);
        LLVMFuzzerTestOneInput(in, n);
    }
    alarm(0);
    printf("cfi_fuzz: %llu inputs from seed %llu in %.1f s: %llu frame rules, %llu outermost, %llu "
           "unsupported\n",
           (unsigned long long)i, (unsigned long long)seed, unit_seconds() - t0, (unsigned long long)n_valid,
           (unsigned long long)n_outermost, (unsigned long long)n_unsupported);
    return 0;
}
#endif
