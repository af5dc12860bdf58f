/* unwind/cfi.c: the CFI parser and interpreter. Hand-built tables (cfi_build.h) give the rule of
 * every kind of frame the "dwarf" unwinder follows and every kind it hands to libunwind; the
 * tables of this very program (gcc's .eh_frame) and of libc are walked frame by frame and checked
 * against what the compiler knows (__builtin_return_address). Each table is copied into a buffer of
 * exactly its size, so ASan catches a read past it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

#include "../../src/unwind/cfi.h"
#include "cfi_build.h"
#include "unit.h"

static uint64_t frame(int cfa_rbp, int64_t off, int rbp_saved, int64_t rbp_off)
{
    return ML_RULE_VALID | (uint64_t)(uint32_t)off | (cfa_rbp ? ML_RULE_CFA_RBP : 0) |
           (rbp_saved ? ML_RULE_RBP_SAVED | ((uint64_t)(uint16_t)(int16_t)rbp_off << 48) : 0);
}

/* The code the tables describe: addresses only, 1 MiB past the tables (within pcrel reach). */
static uint8_t table_buf[CB_MAX];
#define CODE ((uintptr_t)table_buf + 0x100000)

/* The rule for return address `ra` from the tables built in `b`, read from an exact-size copy. */
static uint64_t rule(const struct cb *b, uintptr_t ra)
{
    uint8_t *copy = malloc(b->n);
    memcpy(copy, b->buf, b->n);
    /* the copy's addresses differ: code addresses are relative to the table (pcrel, datarel) */
    uint64_t r = ml_cfi_rule_from(copy, copy, copy + b->n, ra - (uintptr_t)b->buf + (uintptr_t)copy);
    free(copy);
    return r;
}

static const uint8_t cie_init[] = {0x0c, 7, 8, 0x90, 1}; /* CFA = rsp + 8; ra at CFA - 8 */

/* push %rbp; mov %rsp,%rbp; 32 bytes of body; leave; ret; then more body: gcc's frame, with the
 * epilogue's rules remembered and restored. */
static const uint8_t prologue[] = {
    0x41,       /* advance 1: after push %rbp */
    0x0e, 16,   /* def_cfa_offset 16 */
    0x86, 2,    /* rbp saved at CFA - 16 */
    0x43,       /* advance 3: after mov %rsp,%rbp */
    0x0d, 6,    /* def_cfa_register rbp */
    0x02, 32,   /* advance_loc1 32 */
    0x0a,       /* remember_state */
    0x0c, 7, 8, /* def_cfa rsp + 8 (after leave) */
    0x41,       /* advance 1: after ret */
    0x0b,       /* restore_state */
};

/* Tables of one function with gcc's frame (the prologue above) over 48 bytes of CODE. */
static void gcc_frame(struct cb *b)
{
    cb_begin(b, table_buf, 1, "zR", cie_init, sizeof cie_init);
    cb_fde(b, CODE, 48, prologue, sizeof prologue);
    cb_finish(b);
}

TEST(a_frame_pointer_function_at_every_instruction)
{
    struct cb b;
    gcc_frame(&b);
    /* ra - 1 is the call: the rule at that instruction */
    CHECK_EQ(rule(&b, CODE + 1), frame(0, 8, 0, 0));       /* at entry */
    CHECK_EQ(rule(&b, CODE + 2), frame(0, 16, 1, -16));    /* after push %rbp */
    CHECK_EQ(rule(&b, CODE + 4), frame(0, 16, 1, -16));
    CHECK_EQ(rule(&b, CODE + 5), frame(1, 16, 1, -16));    /* after mov %rsp,%rbp */
    CHECK_EQ(rule(&b, CODE + 36), frame(1, 16, 1, -16));
    CHECK_EQ(rule(&b, CODE + 37), frame(0, 8, 1, -16));    /* after leave */
    CHECK_EQ(rule(&b, CODE + 38), frame(1, 16, 1, -16));   /* restored */
    CHECK_EQ(rule(&b, CODE + 48), frame(1, 16, 1, -16));   /* last byte */
    CHECK_EQ(rule(&b, CODE + 49), ML_RULE_UNSUPPORTED);    /* past the FDE */
    CHECK_EQ(rule(&b, CODE), ML_RULE_UNSUPPORTED);         /* before any FDE */
}

/* Three functions: the header's table is searched for the right FDE; a gap between FDEs has none. */
TEST(the_header_table_finds_each_functions_fde)
{
    static const uint8_t big_frame[] = {0x0e, 24};           /* CFA = rsp + 24 from the start */
    static const uint8_t outermost[] = {0x07, 16};           /* ra undefined: the stack's end */
    static const uint8_t far[] = {0x03, 0x00, 0x01, 0x0e, 40, /* advance_loc2 256 */
                                  0x04, 0x00, 0x00, 0x01, 0x00, 0x0e, 48}; /* advance_loc4 65536 */
    struct cb b;
    cb_begin(&b, table_buf, 4, "zR", cie_init, sizeof cie_init);
    cb_fde(&b, CODE, 48, prologue, sizeof prologue);
    cb_fde(&b, CODE + 0x100, 16, big_frame, sizeof big_frame);
    cb_fde(&b, CODE + 0x200, 16, outermost, sizeof outermost);
    cb_fde(&b, CODE + 0x1000, 0x20000, far, sizeof far);
    cb_finish(&b);
    CHECK_EQ(rule(&b, CODE + 5), frame(1, 16, 1, -16));
    CHECK_EQ(rule(&b, CODE + 0x80), ML_RULE_UNSUPPORTED); /* between two functions */
    CHECK_EQ(rule(&b, CODE + 0x101), frame(0, 24, 0, 0));
    CHECK_EQ(rule(&b, CODE + 0x201), ML_RULE_VALID | ML_RULE_OUTERMOST);
    CHECK_EQ(rule(&b, CODE + 0x1000 + 255 + 1), frame(0, 8, 0, 0));
    CHECK_EQ(rule(&b, CODE + 0x1000 + 256 + 1), frame(0, 40, 0, 0));
    CHECK_EQ(rule(&b, CODE + 0x1000 + 256 + 65536 + 1), frame(0, 48, 0, 0));
    CHECK_EQ(rule(&b, CODE + 0x1000 + 0x20000 + 1), ML_RULE_UNSUPPORTED);
}

/* One function of one instruction-stream `prog`; the rule after all of it. */
static uint64_t rule_of(const uint8_t *prog, size_t n, const char *aug)
{
    struct cb b;
    cb_begin(&b, table_buf, 1, aug, cie_init, sizeof cie_init);
    cb_fde(&b, CODE, 64, prog, n);
    cb_finish(&b);
    return rule(&b, CODE + 64);
}
#define RULE_OF(...) rule_of((const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}), "zR")

TEST(instructions_the_dwarf_unwinder_follows)
{
    CHECK_EQ(RULE_OF(0x12, 7, 0x7e), frame(0, 16, 0, 0));                 /* def_cfa_sf rsp, -2 * -8 */
    CHECK_EQ(RULE_OF(0x0e, 16, 0x13, 0x7d), frame(0, 24, 0, 0));          /* def_cfa_offset_sf -3 * -8 */
    CHECK_EQ(RULE_OF(0x0e, 16, 0x11, 6, 0x7e), frame(0, 16, 1, 16));      /* offset_extended_sf rbp, -2 */
    CHECK_EQ(RULE_OF(0x0e, 16, 0x05, 6, 3), frame(0, 16, 1, -24));        /* offset_extended rbp, 3 */
    CHECK_EQ(RULE_OF(0x0e, 16, 0x86, 2, 0xc6), frame(0, 16, 0, 0));       /* restore rbp */
    CHECK_EQ(RULE_OF(0x0e, 16, 0x86, 2, 0x06, 6), frame(0, 16, 0, 0));    /* restore_extended rbp */
    CHECK_EQ(RULE_OF(0x0e, 16, 0x86, 2, 0x07, 6), frame(0, 16, 0, 0));    /* undefined rbp */
    CHECK_EQ(RULE_OF(0x0e, 16, 0x86, 2, 0x08, 6), frame(0, 16, 0, 0));    /* same_value rbp */
    CHECK_EQ(RULE_OF(0x0e, 16, 0x2e, 8, 0x00, 0x00), frame(0, 16, 0, 0)); /* GNU_args_size, nops */
    CHECK_EQ(RULE_OF(0x0c, 6, 16, 0x86, 2), frame(1, 16, 1, -16));        /* def_cfa rbp, 16 */
    CHECK_EQ(RULE_OF(0x10, 3, 2, 0x77, 0x00), frame(0, 8, 0, 0));         /* expression for rbx: not ours */
    CHECK_EQ(RULE_OF(0x14, 3, 1, 0x15, 12, 1), frame(0, 8, 0, 0));        /* val_offset(_sf) for others */
    CHECK_EQ(RULE_OF(0x09, 3, 12), frame(0, 8, 0, 0));                    /* register: rbx in r12 */
    CHECK_EQ(RULE_OF(0x0a, 0x0a, 0x0a, 0x0a, 0x0e, 40, 0x0b, 0x0b, 0x0b, 0x0b), frame(0, 8, 0, 0)); /* 4 deep */
    CHECK_EQ(rule_of((const uint8_t[]){0x0e, 16}, 2, "zRP"), ML_RULE_UNSUPPORTED); /* P with no data: bad */
}

TEST(frames_it_hands_to_libunwind)
{
    CHECK_EQ(RULE_OF(0x0f, 2, 0x77, 0x08), ML_RULE_UNSUPPORTED);                  /* def_cfa_expression */
    CHECK_EQ(RULE_OF(0x0d, 3), ML_RULE_UNSUPPORTED);                              /* CFA in rbx */
    CHECK_EQ(RULE_OF(0x0e, 4), ML_RULE_UNSUPPORTED);                              /* CFA below the ra */
    CHECK_EQ(RULE_OF(0x16, 16, 1, 0x00), ML_RULE_UNSUPPORTED);                    /* val_expression ra */
    CHECK_EQ(RULE_OF(0x10, 6, 1, 0x00), ML_RULE_UNSUPPORTED);                     /* expression rbp */
    CHECK_EQ(RULE_OF(0x09, 6, 3), ML_RULE_UNSUPPORTED);                           /* rbp in rbx */
    CHECK_EQ(RULE_OF(0x14, 16, 1), ML_RULE_UNSUPPORTED);                          /* val_offset ra */
    CHECK_EQ(RULE_OF(0x08, 16), ML_RULE_UNSUPPORTED);                             /* same_value ra */
    CHECK_EQ(RULE_OF(0x90, 2), ML_RULE_UNSUPPORTED);                              /* ra not at CFA - 8 */
    CHECK_EQ(RULE_OF(0x0a, 0x0a, 0x0a, 0x0a, 0x0a), ML_RULE_UNSUPPORTED);         /* 5 remembered */
    CHECK_EQ(RULE_OF(0x0b), ML_RULE_UNSUPPORTED);                                 /* nothing to restore */
    CHECK_EQ(RULE_OF(0x0e, 16, 0x11, 6, 0x90, 0x4e), ML_RULE_UNSUPPORTED);        /* rbp beyond 16 bits */
    CHECK_EQ(RULE_OF(0x0e, 0x80, 0x80, 0x80, 0x80, 0x10), ML_RULE_UNSUPPORTED);   /* CFA offset > 2^31 */
    CHECK_EQ(RULE_OF(0x01, 0, 0, 0, 0), ML_RULE_UNSUPPORTED);                     /* set_loc */
    CHECK_EQ(RULE_OF(0x2f), ML_RULE_UNSUPPORTED);                                 /* a vendor op */
    CHECK_EQ(rule_of((const uint8_t[]){0x0e, 16}, 2, "zRS"), ML_RULE_UNSUPPORTED); /* signal frame */
    CHECK_EQ(rule_of((const uint8_t[]){0x0e, 16}, 2, "eh"), ML_RULE_UNSUPPORTED);  /* old augmentation */
}

/* Tables cut short or lying about their sizes: unsupported, never a read past them (ASan). */
TEST(truncated_and_lying_tables)
{
    struct cb b;
    gcc_frame(&b);
    size_t full = b.n;
    int valid = 0;
    for (size_t cut = 0; cut < full; cut++) { /* every prefix of the tables */
        b.n = cut;
        valid += rule(&b, CODE + 5) != ML_RULE_UNSUPPORTED;
    }
    b.n = full;
    CHECK_EQ(valid, 0); /* the FDE's length reaches past every cut */
    /* lengths and offsets that point outside: the FDE's length, the CIE pointer, the count */
    size_t fde = b.fde[0].at;
    uint32_t was;
    memcpy(&was, table_buf + fde, 4);
    for (uint32_t len = 0; len < 200; len++) {
        cb_put32(&b, fde, len);
        (void)rule(&b, CODE + 5);
    }
    cb_put32(&b, fde, 0xfffffff0u);
    CHECK_EQ(rule(&b, CODE + 5), ML_RULE_UNSUPPORTED);
    cb_put32(&b, fde, was);
    cb_put32(&b, fde + 4, (uint32_t)fde + 1000); /* CIE before the buffer */
    CHECK_EQ(rule(&b, CODE + 5), ML_RULE_UNSUPPORTED);
    cb_put32(&b, fde + 4, (uint32_t)(fde - b.cie_at + 4));
    CHECK_EQ(rule(&b, CODE + 5), frame(1, 16, 1, -16));
    cb_put32(&b, b.hdr_count_at, 1u << 30);
    CHECK_EQ(rule(&b, CODE + 5), ML_RULE_UNSUPPORTED);
    cb_put32(&b, b.hdr_count_at, 1);
    cb_put32(&b, b.table_at + 4, 1u << 20); /* FDE outside */
    CHECK_EQ(rule(&b, CODE + 5), ML_RULE_UNSUPPORTED);
}

/* ---- this program's own tables (gcc's .eh_frame), walked as dwarf.c walks them ---- */

struct regs {
    uintptr_t ra, rsp, rbp;
};

/* One step up: the caller's return address, stack pointer and rbp, from the rule of `r->ra`. */
static int step(struct regs *r)
{
    uint64_t rule = ml_cfi_rule(r->ra);
    if (!(rule & ML_RULE_VALID) || (rule & ML_RULE_OUTERMOST))
        return 0;
    uintptr_t cfa = ((rule & ML_RULE_CFA_RBP) ? r->rbp : r->rsp) + (uintptr_t)ml_rule_cfa_off(rule);
    if (rule & ML_RULE_RBP_SAVED)
        r->rbp = *(uintptr_t *)(cfa + (uintptr_t)ml_rule_rbp_off(rule));
    r->ra = *(uintptr_t *)(cfa - 8);
    r->rsp = cfa;
    return 1;
}

/* The registers of the caller of the function that calls this (which keeps a frame pointer, as the
 * test is built): its return address, its rsp at the call, its rbp. */
#define CALLER_REGS()                                                                                  \
    ((struct regs){(uintptr_t)__builtin_return_address(0), (uintptr_t)__builtin_frame_address(0) + 16, \
                   *(uintptr_t *)__builtin_frame_address(0)})

/* What the callee saw while its callers' frames were live: a walk must read them before they
 * return (after, their stack is reused). */
static struct regs seen, seen_up;
static uint64_t seen_rule;
static int seen_stepped;
static uintptr_t seen_ra_of_caller;

__attribute__((noinline)) static void callee(void)
{
    seen = CALLER_REGS();
    seen_rule = ml_cfi_rule(seen.ra);
    seen_up = seen;
    seen_stepped = step(&seen_up);
    __asm__ volatile("" ::: "memory");
}

/* A caller built without a frame pointer: its CFA is rsp-based. */
__attribute__((noinline, optimize("omit-frame-pointer"))) static void no_fp_caller(void)
{
    volatile char pad[40];
    pad[0] = 1;
    seen_ra_of_caller = (uintptr_t)__builtin_return_address(0);
    callee();
    __asm__ volatile("" ::"r"(pad) : "memory");
}

__attribute__((noinline)) static void fp_caller(void)
{
    seen_ra_of_caller = (uintptr_t)__builtin_return_address(0);
    callee();
    __asm__ volatile("" ::: "memory");
}

TEST(this_programs_frames_match_the_compiler)
{
    CHECK_EQ(ml_cfi_init(), 0);
    fp_caller();
    uint64_t r = seen_rule;
    CHECK_EQ(r & (ML_RULE_VALID | ML_RULE_CFA_RBP | ML_RULE_RBP_SAVED),
             ML_RULE_VALID | ML_RULE_CFA_RBP | ML_RULE_RBP_SAVED);
    CHECK_EQ(ml_rule_cfa_off(r), 16);
    CHECK_EQ(ml_rule_rbp_off(r), -16);
    CHECK(seen_stepped);
    CHECK_EQ(seen_up.ra, seen_ra_of_caller); /* the caller's own return address, found by the rule */

    no_fp_caller();
    r = seen_rule;
    CHECK_EQ(r & (ML_RULE_VALID | ML_RULE_CFA_RBP), ML_RULE_VALID);
    CHECK(ml_rule_cfa_off(r) >= 48); /* the ra, the 40-byte pad, alignment */
    CHECK(seen_stepped);
    CHECK_EQ(seen_up.ra, seen_ra_of_caller);
    /* cached, forgotten, computed again: the same rule; and the same as the uncached seam's */
    CHECK_EQ(ml_cfi_rule(seen.ra), r);
    ml_cfi_forget();
    CHECK_EQ(ml_cfi_rule(seen.ra), r);
    struct dl_find_object fo;
    CHECK_EQ(_dl_find_object((void *)(seen.ra - 1), &fo), 0);
    CHECK_EQ(ml_cfi_rule_from(fo.dlfo_eh_frame, fo.dlfo_map_start, fo.dlfo_map_end, seen.ra), r);
}

/* The C library (no frame pointers, its own CFI; under ASan, the sanitizer's qsort wrapper too)
 * calls back into us from qsort: walking its frames with the rules, from the comparison function,
 * comes out in the function that called qsort, whose caller is then where it returns to. */
static uintptr_t sort_returns_to;
static int walked, came_home, foreign_frames;
static uintptr_t home_caller;

__attribute__((noinline)) static void sort_something(void);

__attribute__((noinline)) static int compare(const void *a, const void *b)
{
    if (!walked++) {
        struct regs r = CALLER_REGS();
        Dl_info me, them;
        dladdr((void *)compare, &me);
        for (int steps = 0; steps < 40; steps++) {
            if (r.ra - (uintptr_t)sort_something < 1024) {
                came_home = 1; /* back in sort_something, after its call to qsort */
                break;
            }
            foreign_frames += dladdr((void *)(r.ra - 1), &them) && them.dli_fbase != me.dli_fbase;
            if (!step(&r))
                break;
        }
        if (came_home && step(&r))
            home_caller = r.ra;
    }
    return memcmp(a, b, sizeof(int));
}

__attribute__((noinline)) static void sort_something(void)
{
    int v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (i * 37) % 64;
    walked = 0;
    sort_returns_to = (uintptr_t)__builtin_return_address(0);
    qsort(v, 64, sizeof *v, compare);
    __asm__ volatile("" ::"r"(v) : "memory");
}

TEST(walking_through_libc_comes_back_to_the_caller_of_qsort)
{
    CHECK_EQ(ml_cfi_init(), 0);
    sort_something();
    CHECK(came_home);
    CHECK(foreign_frames >= 1); /* the walk went through code that is not ours */
    CHECK_EQ(home_caller, sort_returns_to);
}
