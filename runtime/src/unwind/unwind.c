/* Stack capture. Three unwinders:
 *   fp        - walk the rbp chain; each frame is checked against the thread's stack bounds, alignment
 *               and monotonic growth, so garbage in rbp (code built without frame pointers) ends the
 *               walk instead of crashing it.
 *   libgcc    - _Unwind_Backtrace (DWARF CFI), linked through libgcc_s.
 *   libunwind - unw_backtrace from libunwind.so.8 loaded with dlopen(RTLD_LOCAL), only when asked for
 *               (ml_unwind_load_libunwind says why): linking it would put its _Unwind_* symbols in
 *               front of libgcc's and take over the program's C++ exceptions.
 * The dwarf unwinder (dwarf.c) hands the stacks it cannot follow to libgcc.
 * All callers hold ml_tls.busy, so allocations made by an unwinder go straight to the real allocator. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>
#include <unwind.h>

#include "../base/log.h"
#include "../base/proc.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "bounds.h"
#include "cfi.h"
#include "dwarf.h"
#include "unwind.h"

#define SELF_SLACK 16 /* room for our own frames, stripped afterwards */
_Static_assert(ML_UNWIND_BUF >= ML_MAX_DEPTH + SELF_SLACK + 1, "unwind buffer holds max + slack + ra");

static uintptr_t self_lo, self_hi;
static int (*unw_backtrace_fn)(void **, int);

static int is_self(uintptr_t pc) { return pc - self_lo < self_hi - self_lo; }

int ml_unwind_is_self(uintptr_t pc) { return is_self(pc); }

/* Where the rbp chain breaks, the frame above was built without a frame pointer (typically libc's
 * start-up code after main: its rbp holds anything). The walk goes on from there with the DWARF
 * rules, which know where such a frame keeps its return address, so a stack is truncated only when
 * neither can go further before the outermost frame. `fp` is the first frame record, `lo` the lowest
 * address it may be at, `hi` the thread's stack top. */
static int walk_fp(uintptr_t *fp, uintptr_t lo, uintptr_t hi, uintptr_t *pcs, int max, int *trunc)
{
    /* On a foreign stack the thread's bounds say nothing: every page is checked before it is read. */
    int foreign = !ml_on_own_stack(lo, hi);
    if (foreign)
        hi = UINTPTR_MAX;
    int n = 0;
    while (n < max) {
        uintptr_t f = (uintptr_t)fp;
        if (f < lo || f + 16 > hi || f + 16 < f)
            return n; /* left the stack: the chain ended (outermost frames often hold rbp = 0) */
        if ((f & 7) || (foreign && (!ml_readable(f) || !ml_readable(f + 8)))) {
            *trunc = 1;
            return n;
        }
        uintptr_t ret = fp[1];
        uintptr_t *next = (uintptr_t *)fp[0];
        if (ret < 4096)
            return n;
        pcs[n++] = ret;
        uintptr_t nx = (uintptr_t)next;
        if (nx && (nx <= f || (nx & 7))) {
            /* a chain that does not grow towards the stack top is broken here */
            int t = 0, k = ml_dwarf_continue(ret, f + 8, nx, hi, foreign, pcs + n - 1, max - (n - 1), &t);
            if (k < 0) {
                *trunc = 1;
                return n;
            }
            *trunc = t;
            return n - 1 + k;
        }
        fp = next;
    }
    *trunc = 1;
    return n;
}

static ML_NOINLINE int unwind_fp(uintptr_t *pcs, int max, int *trunc)
{
    uintptr_t *fp = __builtin_frame_address(0);
    return walk_fp(fp, (uintptr_t)fp, ml_stack_top(), pcs, max, trunc);
}

struct gcc_walk {
    uintptr_t *pcs;
    int n, max, trunc, done;
    uintptr_t cfa, rbp; /* of the last frame reached */
};

static _Unwind_Reason_Code gcc_step(struct _Unwind_Context *ctx, void *arg)
{
    struct gcc_walk *w = arg;
    uintptr_t pc = _Unwind_GetIP(ctx);
    if (!pc) {
        w->done = 1;
        return _URC_END_OF_STACK;
    }
    if (w->n >= w->max) {
        w->trunc = 1;
        return _URC_END_OF_STACK;
    }
    w->pcs[w->n++] = pc;
    w->cfa = _Unwind_GetCFA(ctx);
    w->rbp = _Unwind_GetGR(ctx, 6); /* DWARF register 6 is rbp */
    return _URC_NO_REASON;
}

/* libgcc stops at a frame without unwind information (JIT-compiled code: node's, the JVM's), where
 * libunwind used to guess on with the frame pointers. So do we: such code keeps its frames chained
 * through rbp, and the walk from its frame on is the bounds-checked fp walk. */
struct dwarf_eh_bases {
    void *tbase, *dbase, *func;
};
extern const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases); /* libgcc_s, GCC_3.0 */

static int no_cfi(uintptr_t pc)
{
    struct dwarf_eh_bases b;
    return _Unwind_Find_FDE((void *)(pc - 1), &b) == NULL;
}

static ML_NOINLINE int unwind_libgcc(uintptr_t *pcs, int max, int *trunc)
{
    struct gcc_walk w = {pcs, 0, max, 0, 0, 0, 0};
    _Unwind_Reason_Code r = _Unwind_Backtrace(gcc_step, &w);
    /* END_OF_STACK: walked to the outermost frame, or to a frame without CFI. Anything else, unless
     * our callback stopped it at a zero pc, means the CFI chain broke. */
    if (!w.trunc && !w.done && w.n > 0 && w.n < max && r == _URC_END_OF_STACK && w.rbp > w.cfa &&
        no_cfi(pcs[w.n - 1])) {
        int t = 0, k = walk_fp((uintptr_t *)w.rbp, w.cfa, ml_stack_top(), pcs + w.n, max - w.n, &t);
        *trunc = t;
        return w.n + k;
    }
    if (w.trunc || (r != _URC_END_OF_STACK && !w.done))
        *trunc = 1;
    return w.n;
}

static ML_NOINLINE int unwind_libunwind(uintptr_t *pcs, int max, int *trunc)
{
    int n = unw_backtrace_fn((void **)pcs, max);
    if (n >= max)
        *trunc = 1;
    return n < 0 ? 0 : n;
}

/* Capture the stack of the current allocation, innermost first, starting with the return address
 * into the caller of malloc (`ra`): unwinds into buf (ML_UNWIND_BUF entries), drops our own frames
 * and points *out at the first frame to keep; returns the number kept (at most max). */
int ml_unwind(uintptr_t *buf, int max, int *trunc, uintptr_t ra, const uintptr_t **out)
{
    /* buf[0] stays free for `ra`, so putting the caller back never needs a copy. */
    uintptr_t *raw = buf + 1;
    int lim = max + SELF_SLACK, n;
    int raw_trunc = 0;
    int u = ml_cfg.unwinder;
    if (u == ML_UNW_DWARF) /* a stack the dwarf unwinder left to us: libgcc (no system call) */
        u = ML_UNW_LIBGCC;
    switch (u) {
    case ML_UNW_LIBUNWIND:
        n = unwind_libunwind(raw, lim, &raw_trunc);
        break;
    case ML_UNW_LIBGCC:
        n = unwind_libgcc(raw, lim, &raw_trunc);
        break;
    default:
        n = unwind_fp(raw, lim, &raw_trunc);
    }
    /* Skip everything up to and including the last frame inside libmemlens (libunwind also reports
     * a frame of its own before ours). */
    int first = 0;
    for (int i = 0; i < n && i < SELF_SLACK + 2; i++) {
        if (is_self(raw[i]))
            first = i + 1;
        else if (first)
            break; /* past our frames: the rest is the program's */
    }
    int rest = n - first;
    /* The exported functions keep no frame pointer, so the fp chain skips straight from our frames to
     * the caller's caller: put the caller back from the return address malloc received (into the
     * slot of the last frame of ours, or buf[0]). */
    if (ra && (rest == 0 || raw[first] != ra)) {
        raw[--first] = ra;
        rest++;
    }
    int take = rest < max ? rest : max;
    *trunc = raw_trunc || take < rest;
    *out = raw + first;
    return take;
}

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t me = (uintptr_t)arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo)
            lo = a;
        if (a + ph->p_memsz > hi)
            hi = a + ph->p_memsz;
    }
    if (me - lo < hi - lo) {
        self_lo = lo;
        self_hi = hi;
        return 1;
    }
    return 0;
}

static _Unwind_Reason_Code warm_step(struct _Unwind_Context *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return _URC_NO_REASON;
}

/* libunwind, loaded only when it was asked for (MEMLENS_UNWINDER=libunwind, `attach unwinder=`):
 * at its first use it calls mincore (outside systemd's @system-service list: a service filtered
 * that way is killed with SIGSYS) and opens a pipe it keeps at low descriptor numbers and later
 * writes to (its memory validation), which a daemon that closes every descriptor may have
 * reopened as its own. Never under a seccomp filter. 0, or -1 with the reason in *why. */
int ml_unwind_load_libunwind(const char **why)
{
    if (unw_backtrace_fn)
        return 0;
    if (ml_seccomp_filtered()) {
        *why = "the process runs under a seccomp filter, and libunwind calls mincore at its first use";
        return -1;
    }
    void *h = dlopen("libunwind.so.8", RTLD_LOCAL | RTLD_NOW);
    /* read now, before another dl call replaces it; the caller's busy count sends what dlerror
     * frees or allocates to the real allocator */
    *why = h ? "unw_backtrace not found in it" : dlerror();
    unw_backtrace_fn = h ? (int (*)(void **, int))dlsym(h, "unw_backtrace") : NULL;
    if (!unw_backtrace_fn)
        return -1;
    void *tmp[4];
    unw_backtrace_fn(tmp, 4); /* its first use initialises it (and allocates): now, not inside malloc */
    return 0;
}

void ml_unwind_setup(void)
{
    dl_iterate_phdr(find_self, (void *)(uintptr_t)&ml_unwind_setup);
    if (ml_cfg.unwinder < 0)
        ml_cfg.unwinder = ML_UNW_DWARF;
    /* The rules serve the dwarf unwinder, and fp where a chain of frame pointers breaks. */
    if ((ml_cfg.unwinder == ML_UNW_DWARF || ml_cfg.unwinder == ML_UNW_FP) && ml_cfi_init() != 0 &&
        ml_cfg.unwinder == ML_UNW_DWARF) {
        ml_log("cannot map the unwind rule table (0x%zx bytes): %m; using libgcc", ml_cfi_table_bytes());
        ml_cfg.unwinder = ML_UNW_LIBGCC;
    }
    const char *why;
    if (ml_cfg.unwinder == ML_UNW_LIBUNWIND && ml_unwind_load_libunwind(&why) != 0) {
        ml_log("libunwind.so.8 cannot be used (%s); using the libgcc unwinder", why ? why : "?");
        ml_cfg.unwinder = ML_UNW_LIBGCC;
    }
    /* First use of each unwinder initialises it (and may allocate): do that now, not inside malloc. */
    _Unwind_Backtrace(warm_step, NULL);
    ml_bounds_setup();
}

/* The configured unwinder first; dwarf hands what it cannot follow to the others. */
uint32_t ml_unwind_intern(uintptr_t ra, int sample)
{
    struct ml_thread *t = &ml_tls;
    t->busy++;
    int trunc = 0;
    uint32_t id;
    if (ml_cfg.unwinder != ML_UNW_DWARF || !ml_dwarf_stack(ra, ml_cfg.max_depth, &id, &trunc)) {
        if (ml_cfg.unwinder == ML_UNW_DWARF && sample)
            atomic_fetch_add_explicit(&ml_st->unwind_fallbacks, 1, memory_order_relaxed);
        uintptr_t buf[ML_UNWIND_BUF];
        const uintptr_t *pcs;
        trunc = 0;
        int depth = ml_unwind(buf, ml_cfg.max_depth, &trunc, ra, &pcs);
        id = ml_stack_intern(pcs, depth, trunc);
    }
    if (trunc && sample && id != ML_NO_STACK)
        atomic_fetch_add_explicit(&ml_st->truncated, 1, memory_order_relaxed);
    t->busy--;
    return id;
}
