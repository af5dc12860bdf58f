/* Entry hooks (patch.h): the jump, the stub and the trampoline, with the instructions decoded and
 * relocated by Zydis (a maintained decoder, compiled into the runtime by build.rs; it allocates
 * nothing), never by a decoder of our own.
 *
 *   site:   jmp rel32 check (or stub)  (5 bytes; the rest of what it displaced becomes int3)
 *   check:  the hook's fast path, emitted here for the common shapes (patch.h): countdown
 *           subtract or range compare, falling through to the trampoline, else to the slow exit
 *   tramp:  endbr64; <displaced instructions, relocated>; <the ones after them, relocated, through
 *           the first ret or jmp (copy_through)>, else jmp rel32 back into the function
 *   exit:   (add the size back to the countdown;) jmp stub
 *   stub:   jmp *target(%rip)          (target: the hook, or the trampoline when the hook is off)
 * So the common call costs one jump (to the check), as an interposed malloc costs one more than
 * the bare one: an allocator's fast path is straight code with branches out to its slow path and
 * one `ret`, which the trampoline holds whole (jemalloc's malloc and free, mimalloc's mi_malloc and
 * mi_free). The C hook runs only when the countdown runs out or the block is ours.
 *
 * Stub and trampoline live in a page mapped within ±2 GiB of the site (rel32 reaches it, and the
 * relocated rip-relative operands still reach their targets). The page is mapped twice (shared
 * anonymous memory): read+execute where it runs, read+write at another address where we write, so
 * no page is ever writable and executable at once (W^X), and a stub is retargeted with one store.
 *
 * A call among the displaced instructions is allowed as the last of them: the trampoline pushes the
 * return address the call would have pushed (in the original code, right after the displaced
 * bytes, which the jump leaves intact) and jumps to the callee, so unwinders and exceptions see the
 * original function's frame. (Under CET shadow stacks such a return would fault; Linux enables them
 * only for programs built and marked for them, which glibc 2.39 and kernel 6.6 begin to do.)
 *
 * What makes a function unhookable (said, never guessed): a call before the fifth byte, an instruction whose relative target cannot be
 * relocated (loop, jrcxz, xbegin) or that Zydis cannot decode; the function is shorter than the
 * jump; a branch in its body jumps into the bytes the jump displaces (decoded over the whole body,
 * as far as its symbol's size says); or no page can be mapped near it. Functions beginning with
 * endbr64 (CET) keep it: the jump goes after it, so indirect calls still land on an endbr64. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <Zydis/Decoder.h>
#include <Zydis/Utils.h>

#include "patch.h"
#include "../base/rt.h"

#define PAGE 4096
#define SLOT 320  /* a stub, the hook's fast check, the trampoline, the slow exit (5 cache lines) */
#define TARGET 0  /* the stub's target, 8 bytes */
#define STUB 8    /* jmp *-14(%rip): 6 bytes */
#define FAST 16   /* the fast check (patch.h), then the trampoline */
#define REACH ((int64_t)1 << 31)
#define NEAR_MAX 64

/* ---- pages near the code we hook ---- */

struct near { uint8_t *rx, *rw; size_t used; };
static struct near pages[NEAR_MAX];
static int npages;
static _Atomic int pages_lock;

static int reaches(uintptr_t from, uintptr_t to)
{
    int64_t d = (int64_t)(to - from);
    return d > -REACH + PAGE && d < REACH - PAGE;
}

/* A page at `hint` (exactly there or nothing), and its writable alias. */
static int map_at(uintptr_t hint, struct near *n)
{
    void *p = mmap((void *)hint, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p == MAP_FAILED)
        return -1;
    if ((uintptr_t)p != hint) { /* a kernel before 4.17 took it as a hint */
        munmap(p, PAGE);
        return -1;
    }
    void *w = mremap(p, 0, PAGE, MREMAP_MAYMOVE);
    if (w == MAP_FAILED || mprotect(p, PAGE, PROT_READ | PROT_EXEC) != 0) {
        if (w != MAP_FAILED)
            munmap(w, PAGE);
        munmap(p, PAGE);
        return -1;
    }
    n->rx = p;
    n->rw = w;
    n->used = 0;
    return 0;
}

/* Probe 2 MiB steps away from the site, above then below, up to 1 GiB. */
static struct near *new_page(uintptr_t site)
{
    if (npages == NEAR_MAX)
        return NULL;
    uintptr_t base = site & ~(uintptr_t)(2 * 1024 * 1024 - 1);
    for (uintptr_t k = 1; k <= 512; k++) {
        uintptr_t step = k * 2 * 1024 * 1024;
        if (base + step > base && map_at(base + step, &pages[npages]) == 0)
            return &pages[npages++];
        if (base > step && map_at(base - step, &pages[npages]) == 0)
            return &pages[npages++];
    }
    return NULL;
}

/* A slot within reach of `site`, or NULL. */
static uint8_t *slot_near(uintptr_t site, uint8_t **rw)
{
    ml_spin_lock(&pages_lock);
    struct near *n = NULL;
    for (int i = 0; i < npages && !n; i++)
        if (pages[i].used + SLOT <= PAGE && reaches(site, (uintptr_t)pages[i].rx))
            n = &pages[i];
    if (!n)
        n = new_page(site);
    uint8_t *s = NULL;
    if (n) {
        s = n->rx + n->used;
        *rw = n->rw + n->used;
        n->used += SLOT;
    }
    ml_spin_unlock(&pages_lock);
    return s;
}

/* ---- decoding ---- */

static ZydisDecoder decoder(void)
{
    ZydisDecoder d;
    ZydisDecoderInit(&d, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    return d;
}

/* The absolute target of a relative branch, or 0 if `ins` is not one. */
static uintptr_t branch_target(const ZydisDecodedInstruction *ins, const ZydisDecodedOperand *ops,
                               uintptr_t at)
{
    if (!(ins->attributes & ZYDIS_ATTRIB_IS_RELATIVE))
        return 0;
    for (int i = 0; i < ins->operand_count_visible; i++) {
        ZyanU64 t;
        if (ops[i].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[i].imm.is_relative &&
            ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(ins, &ops[i], at, &t)))
            return (uintptr_t)t;
    }
    return 0;
}

/* The memory operand addressed relative to rip, if any. */
static const ZydisDecodedOperand *rip_operand(const ZydisDecodedInstruction *ins, const ZydisDecodedOperand *ops)
{
    for (int i = 0; i < ins->operand_count; i++)
        if (ops[i].type == ZYDIS_OPERAND_TYPE_MEMORY && ops[i].mem.base == ZYDIS_REGISTER_RIP)
            return &ops[i];
    return NULL;
}

/* Decode every instruction of [entry, entry+size) (up to 64 KiB) and call `fn` on the relative
 * branches: it returns nonzero to stop. Stops at the first byte Zydis cannot decode (padding or
 * data after the code). */
static int each_branch(uintptr_t entry, size_t size, int (*fn)(void *, const ZydisDecodedInstruction *, uintptr_t),
                       void *arg)
{
    ZydisDecoder d = decoder();
    if (size > 65536)
        size = 65536;
    for (size_t off = 0; off < size;) {
        ZydisDecodedInstruction ins;
        ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
        if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&d, (const void *)(entry + off), size - off, &ins, ops)))
            return 0;
        uintptr_t t = branch_target(&ins, ops, entry + off);
        if (t && fn(arg, &ins, t))
            return 1;
        off += ins.length;
    }
    return 0;
}

struct range { uintptr_t lo, hi; };
static int into(void *arg, const ZydisDecodedInstruction *ins, uintptr_t t)
{
    (void)ins;
    const struct range *r = arg;
    return t >= r->lo && t < r->hi;
}

struct targets { const uintptr_t *t; int n; };
static int calls(void *arg, const ZydisDecodedInstruction *ins, uintptr_t t)
{
    const struct targets *ts = arg;
    if (ins->meta.category != ZYDIS_CATEGORY_CALL && ins->meta.category != ZYDIS_CATEGORY_UNCOND_BR)
        return 0;
    for (int i = 0; i < ts->n; i++)
        if (ts->t[i] == t)
            return 1;
    return 0;
}

int ml_patch_calls_any(uintptr_t entry, size_t size, const uintptr_t *targets, int n)
{
    struct targets ts = {targets, n};
    return each_branch(entry, size, calls, &ts);
}

/* A function too short to hook that cannot pass a pointer on: no branch, no call, nothing but plain
 * instructions and a return (`xor eax, eax; ret`: mimalloc's mi_expand in some builds). */
int ml_patch_inert(uintptr_t entry, size_t size)
{
    ZydisDecoder d = decoder();
    for (size_t off = 0; off < size;) {
        ZydisDecodedInstruction ins;
        ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
        if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&d, (const void *)(entry + off), size - off, &ins, ops)))
            return 0;
        ZydisInstructionCategory c = ins.meta.category;
        if (c == ZYDIS_CATEGORY_CALL || c == ZYDIS_CATEGORY_UNCOND_BR || c == ZYDIS_CATEGORY_COND_BR ||
            (ins.attributes & ZYDIS_ATTRIB_IS_RELATIVE))
            return 0;
        off += ins.length;
        if (c == ZYDIS_CATEGORY_RET)
            return 1;
    }
    return 0;
}

/* ---- relocating the displaced instructions ---- */

static int put_rel32(uint8_t *at, uintptr_t next, uintptr_t target)
{
    int64_t d = (int64_t)(target - next);
    if (d != (int32_t)d)
        return -1;
    int32_t v = (int32_t)d;
    memcpy(at, &v, 4);
    return 0;
}

/* Where a relocated call keeps the return address it pushes: the last 8 bytes of the slot. */
struct ret_quad { uint8_t *rw; uintptr_t rx; };

/* A call, the last instruction displaced: push the address after it (in the original code, which
 * the jump does not cover: unwinders and exceptions see the original function's frame there) and
 * jump to the callee. A direct call becomes jmp rel32; `call *m(%rip)` becomes `jmp *m'(%rip)`. */
static int relocate_call(const ZydisDecodedInstruction *ins, const ZydisDecodedOperand *ops, uintptr_t from,
                         uint8_t *out, uintptr_t to, const struct ret_quad *q, const char **why)
{
    uintptr_t ret = from + ins->length, t = branch_target(ins, ops, from);
    memcpy(q->rw, &ret, 8);
    out[0] = 0xff, out[1] = 0x35; /* push qword [rip + disp32] */
    if (put_rel32(out + 2, to + 6, q->rx) != 0)
        return *why = "its trampoline is out of reach", -1;
    const ZydisDecodedOperand *m = rip_operand(ins, ops);
    if (t) {
        out[6] = 0xe9;
        if (put_rel32(out + 7, to + 11, t) != 0)
            return *why = "a call target out of the trampoline's reach", -1;
        return 11;
    }
    if (m && ins->opcode == 0xff && ins->raw.disp.size == 32) {
        out[6] = 0xff, out[7] = 0x25; /* jmp qword [rip + disp32] */
        uintptr_t abs = from + ins->length + (uintptr_t)ins->raw.disp.value;
        if (put_rel32(out + 8, to + 12, abs) != 0)
            return *why = "a call through memory out of the trampoline's reach", -1;
        return 12;
    }
    return *why = "an indirect call through a register in its first instructions", -1;
}

/* One instruction at `from`, written at `out` (executing at `to`); `last`: the one that completes
 * the 5 bytes. Returns the bytes written, or -1 with *why set. */
static int relocate(const ZydisDecodedInstruction *ins, const ZydisDecodedOperand *ops, uintptr_t from,
                    uint8_t *out, uintptr_t to, int last, const struct ret_quad *q, const char **why)
{
    if (ins->meta.category == ZYDIS_CATEGORY_CALL) {
        if (last)
            return relocate_call(ins, ops, from, out, to, q, why);
        *why = "a call in its first instructions, before the fifth byte";
        return -1;
    }
    uintptr_t t = branch_target(ins, ops, from);
    if (t) {
        int cond = ins->meta.category == ZYDIS_CATEGORY_COND_BR, n;
        if (cond && ins->opcode_map == ZYDIS_OPCODE_MAP_DEFAULT && ins->opcode >= 0x70 && ins->opcode <= 0x7f) {
            out[0] = 0x0f, out[1] = (uint8_t)(0x80 | (ins->opcode & 0xf)), n = 6;
        } else if (cond && ins->opcode_map == ZYDIS_OPCODE_MAP_0F && ins->opcode >= 0x80 && ins->opcode <= 0x8f) {
            out[0] = 0x0f, out[1] = ins->opcode, n = 6;
        } else if (ins->meta.category == ZYDIS_CATEGORY_UNCOND_BR && ins->operand_count_visible == 1) {
            out[0] = 0xe9, n = 5;
        } else {
            *why = "a relative branch it cannot relocate (loop, jrcxz, xbegin) in its first instructions";
            return -1;
        }
        if (put_rel32(out + n - 4, to + (uintptr_t)n, t) != 0) {
            *why = "a branch target out of the trampoline's reach";
            return -1;
        }
        return n;
    }
    memcpy(out, (const void *)from, ins->length);
    if (rip_operand(ins, ops)) {
        if (ins->raw.disp.size != 32) {
            *why = "a rip-relative operand without a 32-bit displacement";
            return -1;
        }
        uintptr_t abs = from + ins->length + (uintptr_t)ins->raw.disp.value;
        if (put_rel32(out + ins->raw.disp.offset, to + ins->length, abs) != 0) {
            *why = "a rip-relative operand out of the trampoline's reach";
            return -1;
        }
    }
    return ins->length;
}

static const uint8_t ENDBR64[4] = {0xf3, 0x0f, 0x1e, 0xfa};

/* Decode one instruction at `at`, reading no further than `left` bytes (the function's end). */
static int decode_at(const ZydisDecoder *d, uintptr_t at, size_t left, ZydisDecodedInstruction *ins,
                     ZydisDecodedOperand *ops)
{
    if (left > ZYDIS_MAX_INSTRUCTION_LENGTH)
        left = ZYDIS_MAX_INSTRUCTION_LENGTH;
    return ZYAN_SUCCESS(ZydisDecoderDecodeFull(d, (const void *)at, left, ins, ops)) && ins->length <= left;
}

static int never_falls_through(const ZydisDecodedInstruction *ins)
{
    ZydisInstructionCategory c = ins->meta.category;
    return c == ZYDIS_CATEGORY_UNCOND_BR || c == ZYDIS_CATEGORY_RET;
}

/* Copy the instructions after the displaced ones too, relocated, up to the first that never falls
 * through (the fast path's `ret`, or its tail jump): the common call then leaves the trampoline by
 * the function's own return instead of a jump back into it, so a hook costs one jump, as
 * interposition does. The original code is left as it is (only the displaced bytes are replaced),
 * so every branch out of the copy, and any branch the copy does not reproduce, lands there. Stops,
 * and jumps back, before a call (its return address must be in the original code, where unwinders
 * and exceptions find the function's frame), before anything it cannot relocate, and when the slot
 * is full. Returns 1 if the copy ends in an instruction that never falls through. */
static int copy_through(const struct ml_patch *p, size_t avail, uint8_t *rw, uintptr_t rx, size_t room,
                        size_t *out, size_t *at_off)
{
    ZydisDecoder d = decoder();
    size_t off = p->len;
    for (;;) {
        ZydisDecodedInstruction ins;
        ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
        uintptr_t at = p->site + off;
        if (off >= avail || !decode_at(&d, at, avail - off, &ins, ops) ||
            ins.meta.category == ZYDIS_CATEGORY_CALL || *out + 16 + 5 > room)
            break;
        const char *why = NULL;
        int n = relocate(&ins, ops, at, rw + *out, rx + *out, 0, NULL, &why);
        if (n < 0)
            break;
        *out += (size_t)n;
        off += ins.length;
        if (never_falls_through(&ins)) {
            *at_off = off;
            return 1;
        }
    }
    *at_off = off;
    return 0;
}

/* Relocate the instructions at p->site into the trampoline at rx (written at rw) until they cover 5
 * bytes (sets p->len), then copy_through. Returns NULL or why not. */
static const char *displace(struct ml_patch *p, size_t avail, uint8_t *rw, uintptr_t rx, const struct ret_quad *q,
                            size_t room, size_t *used)
{
    ZydisDecoder d = decoder();
    size_t out = 0;
    int ends = 0; /* the last instruction never falls through (jmp, ret, a relocated call) */
    p->len = 0;
    while (p->len < 5) {
        ZydisDecodedInstruction ins;
        ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
        uintptr_t at = p->site + p->len;
        if (!decode_at(&d, at, avail - p->len, &ins, ops))
            return avail < 5 ? "it is shorter than the 5-byte jump"
                             : "an instruction Zydis cannot decode in its first bytes";
        if (p->len + ins.length > ML_PATCH_MAX || out + 16 + 5 > room)
            return "its first instructions are too long to displace";
        const char *why = NULL;
        int last = p->len + ins.length >= 5;
        int n = relocate(&ins, ops, at, rw + out, rx + out, last, q, &why);
        if (n < 0)
            return why;
        out += (size_t)n;
        p->len += ins.length;
        ends = never_falls_through(&ins) || ins.meta.category == ZYDIS_CATEGORY_CALL;
    }
    size_t back = p->len;
    if (!ends)
        ends = copy_through(p, avail, rw, rx, room, &out, &back);
    if (!ends) {
        rw[out] = 0xe9;
        if (put_rel32(rw + out + 1, rx + out + 5, p->site + back) != 0)
            return "its code is out of the trampoline's reach";
        out += 5;
    }
    *used = out;
    return NULL;
}

/* ---- the hook's fast check, in front of the trampoline ---- */

/* Emit `bytes` at *o and advance. */
static void emit(uint8_t *w, size_t *o, const void *bytes, size_t n)
{
    memcpy(w + *o, bytes, n);
    *o += n;
}

static void emit_u32(uint8_t *w, size_t *o, uint32_t v) { emit(w, o, &v, 4); }
static void emit_u64(uint8_t *w, size_t *o, uint64_t v) { emit(w, o, &v, 8); }

/* The check at FAST; returns where its branch to the slow exit must be filled in (the rel32), and
 * sets *end to where the trampoline starts. A countdown begins with its on/off switch (patch.h,
 * ml_patch_sampling: `test $rel8, %al` while sampling, `jmp rel8` to the trampoline while not),
 * whose rel8 is filled in by the caller. */
static size_t emit_check(const struct ml_patch_fast *f, uint8_t *w, size_t *end)
{
    size_t o = FAST, rel;
    if (f->kind == ML_FAST_COUNT) {
        static const uint8_t test_al[2] = {0xa8, 0x00}, subq[5] = {0x64, 0x48, 0x29, 0x3c, 0x25};
        emit(w, &o, test_al, 2); /* the switch */
        emit(w, &o, subq, 5);    /* subq %rdi, %fs:off */
        emit_u32(w, &o, (uint32_t)f->tls_off);
        static const uint8_t jle[2] = {0x0f, 0x8e};
        emit(w, &o, jle, 2);
    } else {
        static const uint8_t movabs[2] = {0x49, 0xbb}, mov_sub[6] = {0x48, 0x89, 0xf8, 0x49, 0x2b, 0x03},
                             cmp[3] = {0x49, 0x3b, 0x03}, jb[2] = {0x0f, 0x82};
        emit(w, &o, movabs, 2); /* movabs &base, %r11; mov %rdi, %rax; sub (%r11), %rax */
        emit_u64(w, &o, (uint64_t)f->range_base);
        emit(w, &o, mov_sub, 6);
        emit(w, &o, movabs, 2); /* movabs &span, %r11; cmp (%r11), %rax; jb slow */
        emit_u64(w, &o, (uint64_t)f->range_span);
        emit(w, &o, cmp, 3);
        emit(w, &o, jb, 2);
    }
    rel = o;
    *end = o + 4;
    return rel;
}

/* The slow exit at `o`: undo the countdown (the hook subtracts again), then the stub. */
static void emit_exit(const struct ml_patch_fast *f, uint8_t *w, uintptr_t x, size_t o)
{
    if (f->kind == ML_FAST_COUNT) {
        static const uint8_t addq[5] = {0x64, 0x48, 0x01, 0x3c, 0x25}; /* addq %rdi, %fs:off */
        emit(w, &o, addq, 5);
        emit_u32(w, &o, (uint32_t)f->tls_off);
    }
    w[o] = 0xe9;
    put_rel32(w + o + 1, x + o + 5, x + STUB);
}

const char *ml_patch_plan(struct ml_patch *p, uintptr_t entry, size_t size, void *hook,
                          const struct ml_patch_fast *fast)
{
    memset(p, 0, sizeof *p);
    p->entry = p->site = entry;
    p->hook = hook;
    if (size >= 4 + 5 && !memcmp((const void *)entry, ENDBR64, 4))
        p->site = entry + 4;
    uint8_t *rw;
    uint8_t *slot = slot_near(p->site, &rw);
    if (!slot)
        return "no page could be mapped within 2 GiB of it for the trampoline";
    uintptr_t x = (uintptr_t)slot;
    int fused = fast && fast->kind != ML_FAST_NONE;
    size_t rel = 0, tramp = FAST;
    if (fused)
        rel = emit_check(fast, rw, &tramp);
    /* The trampoline: endbr64 (it is reached by an indirect jump), then the displaced code. */
    memcpy(rw + tramp, ENDBR64, 4);
    struct ret_quad q = {rw + SLOT - 8, x + SLOT - 8};
    size_t used, room = SLOT - 8 - (tramp + 4) - (fused ? 14 : 0);
    const char *why = displace(p, size - (p->site - entry), rw + tramp + 4, x + tramp + 4, &q, room, &used);
    if (why)
        return why;
    if (fused) { /* the slow exit after the trampoline, and the check's branch to it */
        size_t exit_at = tramp + 4 + used;
        emit_exit(fast, rw, x, exit_at);
        put_rel32(rw + rel, x + rel + 4, x + exit_at);
    }
    if (fused && fast->kind == ML_FAST_COUNT) { /* the switch's jump lands on the trampoline */
        rw[FAST + 1] = (uint8_t)(tramp - (FAST + 2));
        p->skip = rw + FAST;
    }
    struct range r = {p->site, p->site + p->len};
    if (each_branch(entry, size, into, &r))
        return "a branch in its body jumps into the bytes the hook would displace";
    /* The stub: jmp *-14(%rip), reading the target at the slot's start. */
    static const uint8_t jmp_ind[6] = {0xff, 0x25, 0xf2, 0xff, 0xff, 0xff};
    memcpy(rw + STUB, jmp_ind, sizeof jmp_ind);
    p->target = (void *_Atomic *)(rw + TARGET);
    ml_patch_retarget(p, hook);
    p->tramp = slot + tramp;
    /* The jump at the site (to the fast check, or to the stub), and int3 over the rest of what it
     * displaced (never reached: no branch lands there, as checked above). */
    memcpy(p->old, (const void *)p->site, p->len);
    memset(p->code, 0xcc, sizeof p->code);
    p->code[0] = 0xe9;
    if (put_rel32(p->code + 1, p->site + 5, x + (fused ? FAST : STUB)) != 0)
        return "its stub is out of reach";
    return NULL;
}
/* ---- writing the jump ---- */

int ml_patch_write(const struct ml_patch *p)
{
    /* Through /proc/self/mem: the kernel writes the text page (a private copy of it) without its
     * protection ever changing, so no page is writable and executable, not even for a moment. */
    int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = pwrite(fd, p->code, p->len, (off_t)p->site);
        close(fd);
        if (n == (ssize_t)p->len)
            return 0;
    }
    /* Else (a kernel that forbids it): make the pages writable for the store. */
    uintptr_t lo = p->site & ~(uintptr_t)(PAGE - 1), hi = (p->site + p->len + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return -1;
    memcpy((void *)p->site, p->code, p->len);
    int e = mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC);
    return e;
}
