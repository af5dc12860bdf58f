/* Unwind rules from DWARF call frame information (.eh_frame), one per return address, cached.
 *
 * On x86-64 a caller's frame is recovered from three things: where its CFA is (rsp or rbp plus an
 * offset), that the return address sits at CFA-8, and where rbp was saved, if it was. That is all
 * the "dwarf" unwinder needs, so instead of a general CFI interpreter this one runs the FDE's
 * program up to the call and keeps only those facts; anything else (CFA expressions, a CFA in
 * another register, signal frames, no FDE) marks the rule unsupported and the whole stack goes to
 * the fallback (libgcc) instead. FDEs are found lock-free with glibc's _dl_find_object and the binary-search
 * table of .eh_frame_hdr. Rules live in a global insert-only table; dlclose clears it.
 *
 * Every read of the tables stays inside the object's mapping (ml_cfi_rule_from's [lo, hi)), and
 * every length and offset in them is checked against it first: a corrupt or hostile .eh_frame gives
 * an unsupported rule, never a read elsewhere or a loop (runtime/tests/unit/cfi_fuzz.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <sys/mman.h>

#include "../base/check.h"
#include "cfi.h"

#define RULE_BITS 16
#define NRULES (1u << RULE_BITS)
#define MAX_PROBE 8

/* x86-64 DWARF register numbers (System V psABI, "DWARF Register Number Mapping"). */
#define DW_REG_RBP 6
#define DW_REG_RSP 7
#define DW_REG_RA 16 /* the return address column */
#define MAX_REMEMBERED 4 /* nesting of DW_CFA_remember_state we follow */

static _Atomic uint64_t *rule_keys, *rule_vals;

size_t ml_cfi_table_bytes(void) { return 2 * NRULES * sizeof(uint64_t); }

int ml_cfi_init(void)
{
    size_t bytes = ml_cfi_table_bytes();
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    rule_keys = p;
    rule_vals = rule_keys + NRULES;
    return 0;
}

int ml_cfi_ready(void) { return rule_keys != NULL; }

void ml_cfi_forget(void)
{
    if (!rule_keys)
        return;
    for (uint32_t i = 0; i < NRULES; i++) {
        atomic_store_explicit(&rule_vals[i], 0, memory_order_relaxed);
        atomic_store_explicit(&rule_keys[i], 0, memory_order_release);
    }
}

/* ---- reading DWARF ---- */

static uint64_t uleb(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
    }
    return v;
}

static int64_t sleb(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0; /* unsigned: the top group may shift into (and past) the sign bit */
    unsigned shift = 0;
    uint8_t b = 0x80;
    while (*p < end && shift < 64 && (b & 0x80)) {
        b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    }
    if (shift < 64 && (b & 0x40))
        v |= ~0ull << shift;
    return (int64_t)v;
}

/* a * b, wrapping: factors come from the tables (a CFA offset times the data alignment) */
static int64_t mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

/* A pointer in one of the encodings gcc and clang emit (absolute or pc-relative, 4 or 8 bytes)
 * read from [*p, end); 0 with *ok = 0 for anything else, or when it does not fit. */
static uintptr_t enc_ptr(const uint8_t **p, const uint8_t *end, uint8_t enc, int *ok)
{
    const uint8_t *at = *p;
    uintptr_t v;
    if (end - at < ((enc & 0x0f) == 0x03 || (enc & 0x0f) == 0x0b ? 4 : 8)) {
        *ok = 0;
        return 0;
    }
    switch (enc & 0x0f) {
    case 0x00: /* absptr */
    case 0x04: /* udata8 */
    case 0x0c: /* sdata8 */
        memcpy(&v, at, 8);
        *p += 8;
        break;
    case 0x03: { /* udata4 */
        uint32_t u;
        memcpy(&u, at, 4);
        v = u;
        *p += 4;
        break;
    }
    case 0x0b: { /* sdata4 */
        int32_t s;
        memcpy(&s, at, 4);
        v = (uintptr_t)(intptr_t)s;
        *p += 4;
        break;
    }
    default:
        *ok = 0;
        return 0;
    }
    switch (enc & 0x70) {
    case 0x00:
        break;
    case 0x10: /* pcrel */
        v += (uintptr_t)at;
        break;
    default:
        *ok = 0;
        return 0;
    }
    return v;
}

/* The FDE covering pc, via .eh_frame_hdr's sorted table (at hdr, inside [lo, hi)); NULL if none. */
static const uint8_t *find_fde(const uint8_t *hdr, const uint8_t *lo, const uint8_t *hi, uintptr_t pc)
{
    const uint8_t *p = hdr + 4;
    int ok = 1;
    if (hdr < lo || hi - hdr < 4 || hdr[0] != 1 || hdr[3] != 0x3b) /* version 1, datarel sdata4 pairs */
        return NULL;
    enc_ptr(&p, hi, hdr[1], &ok); /* eh_frame_ptr: not needed */
    uintptr_t count = enc_ptr(&p, hi, hdr[2], &ok);
    if (!ok || count == 0 || count > (uintptr_t)(hi - p) / 8)
        return NULL;
    const uint8_t *table = p; /* pairs of int32: start, FDE; both relative to hdr */
    intptr_t want = (intptr_t)(pc - (uintptr_t)hdr);
    int32_t e[2];
    size_t lo_i = 0, hi_i = count;
    while (hi_i - lo_i > 1) { /* largest entry whose start <= pc */
        size_t mid = lo_i + (hi_i - lo_i) / 2;
        memcpy(e, table + 8 * mid, 8);
        if (e[0] <= want)
            lo_i = mid;
        else
            hi_i = mid;
    }
    memcpy(e, table + 8 * lo_i, 8);
    uintptr_t fde = (uintptr_t)hdr + (uintptr_t)(intptr_t)e[1];
    if (e[0] > want || fde < (uintptr_t)lo || fde >= (uintptr_t)hi)
        return NULL;
    return (const uint8_t *)fde;
}

/* ---- running the CFA program ---- */

struct cfa_state {
    int cfa_reg;     /* DW_REG_RSP or DW_REG_RBP */
    int64_t cfa_off;
    int rbp_saved;   /* rbp saved at CFA + rbp_off */
    int64_t rbp_off;
    int ra_undefined;
    int bad;
};

struct cie_info {
    uint64_t code_align;
    int64_t data_align;
    uint8_t fde_enc;
    int has_z;
    const uint8_t *insns, *end;
};

/* The CIE at `cie`, inside [lo, hi): 0, or -1 when it is not one this unwinder follows (or does not
 * fit). */
static int parse_cie(const uint8_t *cie, const uint8_t *lo, const uint8_t *hi, struct cie_info *ci)
{
    uint32_t len;
    if (cie < lo || hi - cie < 8)
        return -1;
    memcpy(&len, cie, 4);
    if (len < 5 || len == 0xffffffffu || len > (uint64_t)(hi - cie - 4))
        return -1;
    const uint8_t *p = cie + 8, *end = cie + 4 + len;
    uint8_t version = *p++;
    const char *aug = (const char *)p;
    size_t auglen = strnlen(aug, (size_t)(end - p));
    if (auglen == (size_t)(end - p))
        return -1; /* no NUL before the end */
    p += auglen + 1;
    ci->code_align = uleb(&p, end);
    ci->data_align = sleb(&p, end);
    if (version == 1 && p < end)
        p++;
    else
        uleb(&p, end);
    ci->fde_enc = 0;
    ci->has_z = aug[0] == 'z';
    if (ci->has_z) {
        uint64_t alen = uleb(&p, end);
        if (alen > (uint64_t)(end - p))
            return -1;
        const uint8_t *aend = p + alen;
        for (const char *a = aug + 1; *a; a++) {
            int ok = 1;
            if ((*a == 'R' || *a == 'P' || *a == 'L') && p >= aend)
                return -1;
            if (*a == 'R')
                ci->fde_enc = *p++;
            else if (*a == 'P') {
                uint8_t penc = *p++;
                enc_ptr(&p, aend, penc & 0x7f, &ok); /* personality (indirect bit cleared: not read) */
            } else if (*a == 'L')
                p++;
            else
                return -1; /* 'S' (signal frame) and anything unknown: the fallback's business */
            if (!ok)
                return -1;
        }
        p = aend;
    } else if (aug[0]) {
        return -1;
    }
    ci->insns = p;
    ci->end = end;
    return 0;
}

static void set_reg_offset(struct cfa_state *s, uint64_t reg, int64_t off)
{
    if (reg == DW_REG_RBP) {
        s->rbp_saved = 1;
        s->rbp_off = off;
    } else if (reg == DW_REG_RA && off != -8) {
        s->bad = 1;
    }
}

static void restore_reg(struct cfa_state *s, const struct cfa_state *init, uint64_t reg)
{
    if (reg == DW_REG_RBP) {
        s->rbp_saved = init->rbp_saved;
        s->rbp_off = init->rbp_off;
    } else if (reg == DW_REG_RA) {
        s->ra_undefined = init->ra_undefined;
    }
}

/* DW_CFA_advance_loc1, 2, 4: a little-endian operand of 1, 2 or 4 bytes, which must fit. */
static uintptr_t advance_op(uint8_t op, const uint8_t **pp, const uint8_t *end,
                            const struct cie_info *ci, struct cfa_state *s)
{
    size_t w = op == 0x02 ? 1 : op == 0x03 ? 2 : 4;
    const uint8_t *p = *pp;
    if ((size_t)(end - p) < w) {
        s->bad = 1;
        return 0;
    }
    uint32_t d = 0;
    for (size_t i = 0; i < w; i++)
        d |= (uint32_t)p[i] << (8 * i);
    *pp = p + w;
    return d * ci->code_align;
}

/* The CFA's own rule (def_cfa and its variants): 1 when `op` is one of them. */
static int cfa_op(uint8_t op, const uint8_t **pp, const uint8_t *end, const struct cie_info *ci,
                  struct cfa_state *s)
{
    switch (op) {
    case 0x0c: /* def_cfa */
        s->cfa_reg = (int)uleb(pp, end);
        s->cfa_off = (int64_t)uleb(pp, end);
        return 1;
    case 0x12: /* def_cfa_sf */
        s->cfa_reg = (int)uleb(pp, end);
        s->cfa_off = mul(sleb(pp, end), ci->data_align);
        return 1;
    case 0x0d: /* def_cfa_register */
        s->cfa_reg = (int)uleb(pp, end);
        return 1;
    case 0x0e: /* def_cfa_offset */
        s->cfa_off = (int64_t)uleb(pp, end);
        return 1;
    case 0x13: /* def_cfa_offset_sf */
        s->cfa_off = mul(sleb(pp, end), ci->data_align);
        return 1;
    }
    return 0;
}

/* A rule for a register whose value is a location we cannot follow (undefined, same value, another
 * register, an expression, a value offset): only rbp and the return address matter to us. */
static int other_rule_op(uint8_t op, const uint8_t **pp, const uint8_t *end, struct cfa_state *s)
{
    uint64_t reg = uleb(pp, end);
    int ours = reg == DW_REG_RBP || reg == DW_REG_RA;
    switch (op) {
    case 0x07: /* undefined */
        if (reg == DW_REG_RA)
            s->ra_undefined = 1;
        else if (reg == DW_REG_RBP)
            s->rbp_saved = 0;
        return 1;
    case 0x08: /* same_value */
        if (reg == DW_REG_RBP)
            s->rbp_saved = 0;
        else if (reg == DW_REG_RA)
            s->bad = 1;
        return 1;
    case 0x09: /* register */
        uleb(pp, end);
        s->bad |= ours;
        return 1;
    case 0x10:   /* expression */
    case 0x16: { /* val_expression */
        uint64_t len = uleb(pp, end);
        if (len > (uint64_t)(end - *pp) || ours)
            s->bad = 1;
        else
            *pp += len;
        return 1;
    }
    case 0x14: /* val_offset */
        uleb(pp, end);
        s->bad |= ours;
        return 1;
    case 0x15: /* val_offset_sf */
        sleb(pp, end);
        s->bad |= ours;
        return 1;
    }
    return 0;
}

/* A register's rule (offset, restore and the ones other_rule_op reads): 1 when `op` is one. */
static int reg_op(uint8_t op, const uint8_t **pp, const uint8_t *end, const struct cie_info *ci,
                  struct cfa_state *s, const struct cfa_state *init)
{
    switch (op) {
    case 0x05: { /* offset_extended */
        uint64_t reg = uleb(pp, end);
        set_reg_offset(s, reg, mul((int64_t)uleb(pp, end), ci->data_align));
        return 1;
    }
    case 0x11: { /* offset_extended_sf */
        uint64_t reg = uleb(pp, end);
        set_reg_offset(s, reg, mul(sleb(pp, end), ci->data_align));
        return 1;
    }
    case 0x06: /* restore_extended */
        restore_reg(s, init, uleb(pp, end));
        return 1;
    case 0x07:
    case 0x08:
    case 0x09:
    case 0x10:
    case 0x14:
    case 0x15:
    case 0x16:
        return other_rule_op(op, pp, end, s);
    }
    return 0;
}

/* remember_state / restore_state: a stack of states MAX_REMEMBERED deep. */
struct remembered {
    struct cfa_state st[MAX_REMEMBERED];
    int depth;
};

static void state_op(uint8_t op, struct remembered *r, struct cfa_state *s)
{
    if (op == 0x0a) { /* remember_state */
        if (r->depth == MAX_REMEMBERED)
            s->bad = 1;
        else
            r->st[r->depth++] = *s;
        ML_ASSERT(r->depth <= MAX_REMEMBERED);
    } else { /* restore_state */
        if (r->depth == 0)
            s->bad = 1;
        else
            *s = r->st[--r->depth];
        ML_ASSERT(r->depth >= 0);
    }
}

/* An instruction with no operand in its opcode byte; returns how far it advances the location. */
static uintptr_t extended_op(uint8_t op, const uint8_t **pp, const uint8_t *end,
                             const struct cie_info *ci, struct cfa_state *s,
                             const struct cfa_state *init, struct remembered *r)
{
    switch (op) {
    case 0x00: /* nop */
        return 0;
    case 0x02: /* advance_loc1, 2, 4 */
    case 0x03:
    case 0x04:
        return advance_op(op, pp, end, ci, s);
    case 0x0a: /* remember_state, restore_state */
    case 0x0b:
        state_op(op, r, s);
        return 0;
    case 0x2e: /* GNU_args_size */
        uleb(pp, end);
        return 0;
    }
    if (!cfa_op(op, pp, end, ci, s) && !reg_op(op, pp, end, ci, s, init))
        s->bad = 1; /* def_cfa_expression, set_loc, vendor ops: not ours to interpret */
    return 0;
}

/* Executes the CFA program [p, end) until the location passes `target`, keeping in `s` only what
 * the unwinder needs; init = the state after the CIE (for the restore ops). */
static void execute_cfa_program(const uint8_t *p, const uint8_t *end, const struct cie_info *ci,
                                uintptr_t loc, uintptr_t target, struct cfa_state *s,
                                const struct cfa_state *init)
{
    struct remembered r; /* not cleared: only what remember_state pushed is read */
    r.depth = 0;
    while (p < end && !s->bad) {
        uint8_t op = *p++, low = op & 0x3f;
        uintptr_t adv = 0;
        switch (op & 0xc0) {
        case 0x40: /* advance_loc */
            adv = low * ci->code_align;
            break;
        case 0x80: /* offset */
            set_reg_offset(s, low, mul((int64_t)uleb(&p, end), ci->data_align));
            continue;
        case 0xc0: /* restore */
            restore_reg(s, init, low);
            continue;
        default:
            adv = extended_op(op, &p, end, ci, s, init, &r);
            break;
        }
        loc += adv;
        if (loc > target)
            return;
    }
}

uint64_t ml_cfi_rule_from(const uint8_t *hdr, const uint8_t *lo, const uint8_t *hi, uintptr_t ra)
{
    uintptr_t target = ra - 1;
    const uint8_t *fde = find_fde(hdr, lo, hi, target);
    if (!fde || hi - fde < 8)
        return ML_RULE_UNSUPPORTED;
    uint32_t len, cie_off;
    memcpy(&len, fde, 4);
    memcpy(&cie_off, fde + 4, 4);
    if (len < 4 || len == 0xffffffffu || len > (uint64_t)(hi - fde - 4) || cie_off == 0 ||
        cie_off > (uint64_t)(fde + 4 - lo))
        return ML_RULE_UNSUPPORTED;
    struct cie_info ci;
    if (parse_cie(fde + 4 - cie_off, lo, hi, &ci) != 0)
        return ML_RULE_UNSUPPORTED;
    const uint8_t *p = fde + 8, *end = fde + 4 + len;
    int ok = 1;
    uintptr_t begin = enc_ptr(&p, end, ci.fde_enc, &ok);
    uintptr_t range = enc_ptr(&p, end, ci.fde_enc & 0x0f, &ok);
    if (!ok || target < begin || target - begin >= range)
        return ML_RULE_UNSUPPORTED;
    if (ci.has_z) {
        uint64_t alen = uleb(&p, end);
        if (alen > (uint64_t)(end - p))
            return ML_RULE_UNSUPPORTED;
        p += alen;
    }
    struct cfa_state s = {.cfa_reg = DW_REG_RSP, .cfa_off = 8}, init;
    execute_cfa_program(ci.insns, ci.end, &ci, begin, UINTPTR_MAX, &s, &s);
    init = s;
    execute_cfa_program(p, end, &ci, begin, target, &s, &init);
    if (s.bad || (s.cfa_reg != DW_REG_RSP && s.cfa_reg != DW_REG_RBP) || s.cfa_off < 8 || s.cfa_off > INT32_MAX ||
        s.rbp_off < INT16_MIN || s.rbp_off > INT16_MAX)
        return ML_RULE_UNSUPPORTED;
    if (s.ra_undefined)
        return ML_RULE_VALID | ML_RULE_OUTERMOST;
    return ML_RULE_VALID | (uint64_t)(uint32_t)s.cfa_off | (s.cfa_reg == DW_REG_RBP ? ML_RULE_CFA_RBP : 0) |
           (s.rbp_saved ? ML_RULE_RBP_SAVED | ((uint64_t)(uint16_t)(int16_t)s.rbp_off << 48) : 0);
}

/* Compute the rule for return address `ra` (the call is at ra - 1) from the tables of the object
 * holding it, read within its mapping. */
static uint64_t compute(uintptr_t ra)
{
    struct dl_find_object fo;
    if (_dl_find_object((void *)(ra - 1), &fo) != 0 || !fo.dlfo_eh_frame)
        return ML_RULE_UNSUPPORTED;
    return ml_cfi_rule_from(fo.dlfo_eh_frame, fo.dlfo_map_start, fo.dlfo_map_end, ra);
}

/* A rule is either valid or unsupported, never 0 (0 marks a slot being filled); a valid frame rule
 * puts the CFA above the return address's slot. */
static int rule_ok(uint64_t r)
{
    if (!r || !(r & ML_RULE_VALID) == !(r & ML_RULE_UNSUPPORTED))
        return 0;
    return !(r & ML_RULE_VALID) || (r & ML_RULE_OUTERMOST) || ml_rule_cfa_off(r) >= 8;
}

uint64_t ml_cfi_rule(uintptr_t ra)
{
    if (!rule_keys)
        return ML_RULE_UNSUPPORTED;
    uint32_t idx = (uint32_t)((ra * 0x9E3779B97F4A7C15ull) >> (64 - RULE_BITS));
    for (int i = 0; i < MAX_PROBE; i++, idx = (idx + 1) & (NRULES - 1)) {
        uint64_t k = atomic_load_explicit(&rule_keys[idx], memory_order_acquire);
        ML_ASSERT(idx < NRULES);
        if (k == ra) {
            uint64_t v = atomic_load_explicit(&rule_vals[idx], memory_order_acquire);
            ML_ASSERT(!v || rule_ok(v));
            if (v)
                return v;
            break; /* being filled in by another thread: compute our own */
        }
        if (k == 0) {
            uint64_t v = compute(ra);
            ML_ASSERT(rule_ok(v));
            if (atomic_compare_exchange_strong_explicit(&rule_keys[idx], &k, ra, memory_order_acq_rel,
                                                        memory_order_acquire))
                atomic_store_explicit(&rule_vals[idx], v, memory_order_release);
            return v;
        }
    }
    return compute(ra);
}
