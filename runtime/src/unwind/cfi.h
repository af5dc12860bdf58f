/* DWARF unwind rules, per return address (cfi.c); dwarf.c walks them. */
#ifndef MEMLENS_CFI_H
#define MEMLENS_CFI_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* A rule, packed in 64 bits; 0 is never a rule.
 *   bits 0-31  CFA offset (from rsp, or from rbp with ML_RULE_CFA_RBP)
 *   bits 48-63 where rbp was saved, relative to the CFA (with ML_RULE_RBP_SAVED) */
#define ML_RULE_CFA_RBP (1ull << 32)
#define ML_RULE_RBP_SAVED (1ull << 33)
#define ML_RULE_OUTERMOST (1ull << 34)   /* the return address is undefined: the stack ends here */
#define ML_RULE_UNSUPPORTED (1ull << 35) /* no FDE, or CFI this unwinder does not follow */
#define ML_RULE_VALID (1ull << 36)
static inline int64_t ml_rule_cfa_off(uint64_t r) { return (int32_t)(uint32_t)r; }
static inline int64_t ml_rule_rbp_off(uint64_t r) { return (int16_t)(uint16_t)(r >> 48); }

int ml_cfi_init(void);
/* The rule table's size (ml_cfi_init maps it), for the message when it cannot. */
size_t ml_cfi_table_bytes(void);
/* ml_cfi_init succeeded. */
int ml_cfi_ready(void);
/* The rule of the frame that called through return address `ra`. */
uint64_t ml_cfi_rule(uintptr_t ra);
/* Forget every rule (code was unloaded: its addresses may be reused by other code). */
void ml_cfi_forget(void);
/* The rule for `ra` from one object's tables, uncached: `hdr` its .eh_frame_hdr, every read inside
 * [lo, hi) (its mapping; the seam the unit test and the fuzzer feed their own bytes through). */
uint64_t ml_cfi_rule_from(const uint8_t *hdr, const uint8_t *lo, const uint8_t *hi, uintptr_t ra);

#pragma GCC visibility pop
#endif
