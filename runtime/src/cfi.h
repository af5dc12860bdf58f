/* DWARF unwind rules (cfi.c) and the unwinder built on them (dwarf.c). */
#ifndef MEMLENS_CFI_H
#define MEMLENS_CFI_H
#include "rt.h"

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
/* ml_cfi_init succeeded. */
int ml_cfi_ready(void);
/* dwarf.c: a walk from a frame another unwinder reached — `ra` stored at sp0 (the caller's stack
 * pointer at the call is sp0 + 8), rbp0 the caller's rbp — into pcs (ra first). The number of
 * frames, or -1 if a frame has no CFI this unwinder follows. */
int ml_dwarf_continue(uintptr_t ra, uintptr_t sp0, uintptr_t rbp0, uintptr_t hi, int foreign,
                      uintptr_t *pcs, int max, int *trunc);
/* The rule of the frame that called through return address `ra`. */
uint64_t ml_cfi_rule(uintptr_t ra);
/* Forget every rule (code was unloaded: its addresses may be reused by other code). */
void ml_cfi_forget(void);
#endif
