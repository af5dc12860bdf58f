/* Whose anonymous mapping is this (mmapwho.h)?
 *
 * An allocator the program brings (jemalloc, tcmalloc, mimalloc: preloaded, a library, or linked
 * into a module) takes its arenas with the same mmap the program calls, and memlens already counts
 * its blocks (the interposed malloc forwards to it, or its entry points are hooked). Its mapping's
 * stack says so: a frame in the runtime (a sampled or slow path that called the allocator), in the
 * module the next malloc lives in when that is not the C library, or in a function of a linked-in
 * allocator, known by its symbol prefix in a module that defines that allocator's malloc. The fast
 * paths tail-call the allocator, so most arena mappings show no frame of ours: hence the other two.
 *
 * Modules are looked at once, the first time a stack runs through them (their symbols read from the
 * file, elfsym.c), and kept: code ranges, and for each the sorted ranges of allocator functions.
 * glibc's own malloc maps through its internal __mmap, never through us: nothing to drop. */
#define _GNU_SOURCE
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../unwind/unwind.h"
#include "elfsym.h"
#include "family.h"
#include "hooks.h"
#include "mmapwho.h"

#define MODS_MAX 128
#define FNS_MAX (1u << 18)

struct fn { uintptr_t lo, hi; };
struct amod { uintptr_t lo, hi; uint32_t first, n; int whole; };
static struct amod mods[MODS_MAX];
static int nmods;
static struct fn *fns; /* every module's allocator functions, one sorted run per module */
static uint32_t nfns;
static _Atomic int lock;

/* An allocator by the prefixes of its functions, present in a module that defines one of its entry
 * points memlens hooks (hooks.h's rows: `je_`/`_rjem_` + the standard names, `mi_*`, `tc_*`; a bare
 * `mallocx` is libjemalloc.a's). Rust's allocator crates define only some (`mi_malloc_aligned`,
 * `_rjem_mallocx`), so any one will do. */
enum { A_JE, A_RJEM, A_MI, A_TC, NALLOC };
static const char *const ENTRY_PREFIX[NALLOC] = {"je_", "_rjem_", "mi_", "tc_"};
static const uint8_t TABLE[NALLOC] = {T_STD, T_STD, T_MI, T_TC};
static const char *const PREFIXES[NALLOC][3] = {{"je_", NULL, NULL}, {"_rjem_", NULL, NULL},
                                                 {"mi_", "_mi_", NULL}, {"tc_", "_ZN8tcmalloc", "_Z20TCMalloc"}};

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

/* The allocator whose hooked entry point `name` is, or -1. */
static int entry_of(const char *name)
{
    if (!strcmp(name, "mallocx"))
        return A_JE;
    for (int a = 0; a < NALLOC; a++) {
        if (!starts(name, ENTRY_PREFIX[a]))
            continue;
        const char *rest = name + strlen(ENTRY_PREFIX[a]);
        for (int r = 0; r < HK_NROWS; r++)
            if (hk_rows[r].table == TABLE[a] && !strcmp(hk_rows[r].name, rest))
                return a;
    }
    return -1;
}

/* ---- one module's allocator functions ---- */

struct scan { uintptr_t base; uint32_t first; uint8_t present[NALLOC]; };

static int alloc_of(const char *name)
{
    for (int a = 0; a < NALLOC; a++)
        for (int k = 0; k < 3 && PREFIXES[a][k]; k++)
            if (starts(name, PREFIXES[a][k]))
                return a;
    return -1;
}

/* Every function with an allocator's prefix is kept; until keep_present decodes it, `hi` holds its
 * end shifted left by 2 and the allocator in the 2 bits freed (user addresses are below 2^47). */
static void on_symbol(void *arg, const char *name, uint64_t value, uint64_t size, int dyn)
{
    (void)dyn;
    struct scan *sc = arg;
    int e = entry_of(name);
    if (e >= 0)
        sc->present[e] = 1;
    int a = alloc_of(name);
    if (a < 0 || !size || nfns == FNS_MAX)
        return;
    fns[nfns].lo = sc->base + value;
    fns[nfns].hi = ((sc->base + value + size) << 2) | (uintptr_t)a;
    nfns++;
}

/* Keep the functions of the allocators the module defines (a stray `mi_` function of a program
 * without mimalloc is not one), decode their ends and sort them (insertion: a few thousand). */
static uint32_t keep_present(const struct scan *sc)
{
    uint32_t w = sc->first;
    for (uint32_t i = sc->first; i < nfns; i++) {
        struct fn f = fns[i];
        if (!sc->present[f.hi & 3])
            continue;
        f.hi >>= 2;
        uint32_t j = w++;
        while (j > sc->first && fns[j - 1].lo > f.lo) {
            fns[j] = fns[j - 1];
            j--;
        }
        fns[j] = f;
    }
    nfns = w;
    return w - sc->first;
}

void *ml_mmap_table(size_t bytes)
{
    long p = syscall(SYS_mmap, NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    return p == -1 ? NULL : (void *)p;
}

static int fns_ready(void)
{
    if (!fns)
        fns = ml_mmap_table((size_t)FNS_MAX * sizeof *fns);
    return fns != NULL;
}

/* ---- the modules ---- */

struct find { uintptr_t pc; struct amod m; const char *path; uintptr_t base; };

static void span(struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
    *lo = UINTPTR_MAX, *hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        *lo = a < *lo ? a : *lo;
        *hi = a + ph->p_memsz > *hi ? a + ph->p_memsz : *hi;
    }
}

static int find_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find *f = arg;
    uintptr_t lo, hi;
    span(info, &lo, &hi);
    if (f->pc - lo >= hi - lo)
        return 0;
    f->m.lo = lo, f->m.hi = hi;
    f->base = info->dlpi_addr;
    /* the program itself is listed first, without a name */
    f->path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "/proc/self/exe";
    return 1;
}

static int in(const struct amod *m, uintptr_t pc) { return pc - m->lo < m->hi - m->lo; }

/* The module of pc, looked at now (lock held). NULL if pc is in none, or the table is full. */
static struct amod *add_module(uintptr_t pc)
{
    struct find f = {.pc = pc};
    if (nmods == MODS_MAX || !dl_iterate_phdr(find_module, &f))
        return NULL;
    struct amod *m = &mods[nmods++];
    *m = f.m;
    m->first = nfns;
    uintptr_t next = (uintptr_t)ml_next.malloc, libc = (uintptr_t)&getpid;
    m->whole = ml_unwind_is_self(pc) || (in(m, next) && !in(m, libc));
    if (m->whole || in(m, libc) || !fns_ready())
        return m; /* the C library's malloc maps through its internal __mmap */
    struct scan sc = {.base = f.base, .first = nfns};
    ml_elf_symbols(f.path, on_symbol, &sc);
    m->n = keep_present(&sc);
    return m;
}

static int in_fns(const struct amod *m, uintptr_t pc)
{
    uint32_t lo = m->first, hi = m->first + m->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (fns[mid].hi <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->first + m->n && fns[lo].lo <= pc;
}

/* Is pc (a return address: pc - 1 is the call) in an allocator's code? Lock held. */
static int allocator_pc(uintptr_t pc)
{
    struct amod *m = NULL;
    for (int i = 0; i < nmods && !m; i++)
        if (in(&mods[i], pc - 1))
            m = &mods[i];
    if (!m)
        m = add_module(pc - 1);
    return m && (m->whole || in_fns(m, pc - 1));
}

/* The lock, waited for a few milliseconds at most. The thread holding it may be waiting for the
 * loader's lock (dl_iterate_phdr), held by this thread if it maps memory from a library's
 * constructor under dlopen: giving up then (the sample is kept, as the program's) never deadlocks. */
static int bounded_lock(void)
{
    for (int i = 0; i < (1 << 16); i++) {
        if (!atomic_exchange_explicit(&lock, 1, memory_order_acquire))
            return 1;
        __builtin_ia32_pause();
    }
    return 0;
}

int ml_mmap_by_allocator(uintptr_t ra)
{
    struct ml_thread *t = &ml_tls;
    t->busy++; /* what the symbol reader maps or allocates is the runtime's own */
    uintptr_t buf[ML_UNWIND_BUF];
    const uintptr_t *pcs;
    int trunc = 0, by = 0;
    /* the raw stack: ml_unwind keeps the frames of ours above the program's (a malloc of ours
     * that called the allocator) and drops only those of the mmap call itself */
    int n = ml_unwind(buf, ML_MAX_DEPTH, &trunc, ra, &pcs);
    for (int i = 0; i < n && !by; i++)
        by = ml_unwind_is_self(pcs[i]);
    if (!by && bounded_lock()) {
        for (int i = 0; i < n && !by; i++)
            by = allocator_pc(pcs[i]);
        ml_spin_unlock(&lock);
    }
    t->busy--;
    return by;
}
