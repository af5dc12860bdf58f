/* Building unwind tables by hand for the CFI tests (cfi_test.c) and the fuzzer's seeds
 * (cfi_fuzz.c): an .eh_frame_hdr with its sorted table, one CIE and FDEs, laid out in one buffer as
 * a linker would lay out an object's tables. Code addresses are plain numbers (the rules are read,
 * never the code). */
#ifndef MEMLENS_CFI_BUILD_H
#define MEMLENS_CFI_BUILD_H
#include <stdint.h>
#include <string.h>

#define CB_MAX 8192
#define CB_MAX_FDES 16

struct cb {
    uint8_t *buf; /* CB_MAX bytes, the caller's */
    size_t n;
    size_t hdr_count_at, table_at, cie_at;
    int nfde;
    struct {
        uintptr_t start;
        size_t at;
    } fde[CB_MAX_FDES];
};

static inline void cb_u8(struct cb *b, uint8_t v)
{
    if (b->n < CB_MAX)
        b->buf[b->n++] = v;
}
static inline void cb_u32(struct cb *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        cb_u8(b, (uint8_t)(v >> (8 * i)));
}
static inline void cb_put32(struct cb *b, size_t at, uint32_t v) { memcpy(b->buf + at, &v, 4); }
static inline void cb_uleb(struct cb *b, uint64_t v)
{
    do {
        uint8_t c = v & 0x7f;
        v >>= 7;
        cb_u8(b, (uint8_t)(c | (v ? 0x80 : 0)));
    } while (v);
}
static inline void cb_sleb(struct cb *b, int64_t v)
{
    for (;;) {
        uint8_t c = v & 0x7f;
        v >>= 7; /* arithmetic */
        int done = (v == 0 && !(c & 0x40)) || (v == -1 && (c & 0x40));
        cb_u8(b, (uint8_t)(c | (done ? 0 : 0x80)));
        if (done)
            return;
    }
}
static inline void cb_bytes(struct cb *b, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cb_u8(b, p[i]);
}

/* The header with room for `nfde` table entries (filled in by cb_finish), then a CIE as gcc emits
 * it: "zR", code alignment 1, data alignment -8, return address column 16, pc-relative sdata4
 * FDE pointers, then `init` (the CIE's initial instructions). aug: the augmentation string. */
static inline void cb_begin(struct cb *b, uint8_t *buf, int nfde, const char *aug, const uint8_t *init,
                            size_t ninit)
{
    memset(b, 0, sizeof *b);
    b->buf = buf;
    cb_u8(b, 1);    /* version */
    cb_u8(b, 0x1b); /* eh_frame_ptr: pcrel sdata4 */
    cb_u8(b, 0x03); /* fde_count: udata4 */
    cb_u8(b, 0x3b); /* table: datarel sdata4 */
    cb_u32(b, 0);   /* eh_frame_ptr (not read) */
    b->hdr_count_at = b->n;
    cb_u32(b, (uint32_t)nfde);
    b->table_at = b->n;
    for (int i = 0; i < 2 * nfde; i++)
        cb_u32(b, 0);
    b->cie_at = b->n;
    cb_u32(b, 0); /* length, below */
    cb_u32(b, 0); /* CIE id */
    cb_u8(b, 1);  /* version */
    cb_bytes(b, (const uint8_t *)aug, strlen(aug) + 1);
    cb_uleb(b, 1);  /* code alignment */
    cb_sleb(b, -8); /* data alignment */
    cb_u8(b, 16);   /* return address column */
    if (aug[0] == 'z') {
        cb_uleb(b, 1);
        cb_u8(b, 0x1b); /* 'R': FDE pointers pcrel sdata4 */
    }
    cb_bytes(b, init, ninit);
    while ((b->n - b->cie_at) % 8 != 4)
        cb_u8(b, 0); /* DW_CFA_nop padding */
    cb_put32(b, b->cie_at, (uint32_t)(b->n - b->cie_at - 4));
}

/* An FDE for code [start, start + len) running program `prog` (CFA instructions). FDEs must be
 * added in increasing `start`: the table is sorted. */
static inline void cb_fde(struct cb *b, uintptr_t start, uint32_t len, const uint8_t *prog, size_t nprog)
{
    size_t at = b->n;
    cb_u32(b, 0);                                 /* length, below */
    cb_u32(b, (uint32_t)(at + 4 - b->cie_at));    /* CIE pointer: back to the CIE */
    cb_u32(b, (uint32_t)(start - ((uintptr_t)b->buf + b->n))); /* pc_begin, pc-relative */
    cb_u32(b, len);
    cb_uleb(b, 0); /* augmentation data */
    cb_bytes(b, prog, nprog);
    while ((b->n - at) % 8 != 4)
        cb_u8(b, 0);
    cb_put32(b, at, (uint32_t)(b->n - at - 4));
    if (b->nfde < CB_MAX_FDES) {
        b->fde[b->nfde].start = start;
        b->fde[b->nfde].at = at;
        b->nfde++;
    }
}

/* The header's table: (start, FDE) relative to the header, as the linker sorts it. */
static inline void cb_finish(struct cb *b)
{
    for (int i = 0; i < b->nfde; i++) {
        cb_put32(b, b->table_at + 8 * (size_t)i, (uint32_t)(b->fde[i].start - (uintptr_t)b->buf));
        cb_put32(b, b->table_at + 8 * (size_t)i + 4, (uint32_t)b->fde[i].at);
    }
    cb_put32(b, b->hdr_count_at, (uint32_t)b->nfde);
}

#endif
