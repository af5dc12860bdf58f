/* Allocators linked into the program (finder.h).
 *
 * Every loaded module's symbols (elfsym.c: .symtab, .dynsym, MiniDebugInfo, the debug file) are
 * looked up for the entry points of hooks.h: jemalloc's public API bare (a program linking
 * libjemalloc.a), with `je_` (redis's bundled jemalloc) or `_rjem_` (Rust's tikv-jemallocator),
 * mimalloc's `mi_*`, gperftools' `tc_*`, and malloc/free with C++ new/delete defined in the
 * program itself by an allocator memlens does not know. An allocator is hooked as a whole or not at
 * all: every entry point that takes a pointer (free, realloc, usable size) must be hooked, or a
 * block of ours could reach the allocator. Names at one address (malloc = mi_malloc, operator new =
 * tc_new) are one entry point. An allocating entry point that calls another one directly (mi_new
 * calls mi_malloc) is left alone, or one allocation would be counted twice.
 *
 * malloc and free that a shared library exports are not hooked: the interposed functions (alloc.c,
 * or the GOT slots under attach) already stand in front of them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/fmt.h"
#include "../base/log.h"
#include "../base/notes.h"
#include "../record/range.h"
#include "elfsym.h"
#include "finder.h"
#include "hooks.h"
#include "patch.h"

enum { P_NONE, P_JE, P_RJEM, P_MI, P_TC, NPFX };
static const char *const PREFIX[NPFX] = {"", "je_", "_rjem_", "mi_", "tc_"};

#define MAX_PATCHES 512
#define MAX_SCANNED 1024

static struct ml_patch patches[MAX_PATCHES];
static int npatches, nslots;
static uintptr_t scanned[MAX_SCANNED]; /* bases of the modules looked at */
static uint8_t alive[MAX_SCANNED];      /* listed by this scan (a module dlclose'd is forgotten) */
static int nscanned;
static _Atomic int scan_lock;

/* The table `memlens attach` reads (ML_HOOK_DEFER): the jumps to write, with what must be there
 * now. Its layout is read by crates/memlens-attach (hooks.rs): change both together. */
#define PENDING_MAGIC 0x6d6c686f6f6b7332ull /* "mlhooks2" */
struct ml_pending_patch {
    uint64_t site;
    uint8_t len;
    uint8_t code[ML_PATCH_MAX];
    uint8_t old[ML_PATCH_MAX];
    uint8_t pad[7];
};
struct ml_pending {
    uint64_t magic;
    uint32_t count;
    _Atomic uint32_t state; /* 0 nothing to do, 1 waiting for memlens, 2 written by memlens,
                             * 3 some put back by memlens detach */
    char summary[1024];     /* what was found, for memlens attach to print */
    struct ml_pending_patch p[MAX_PATCHES]; /* pad[0]: 1 for an allocating entry point; pad[1]: 1
                                             * for one that takes a pointer (free, realloc) */
};
ML_EXPORT struct ml_pending memlens_pending = {PENDING_MAGIC, 0, 0, {0}, {{0}}};

/* ---- the symbols of one module ---- */

struct hit { uintptr_t addr; size_t size; uint8_t dyn, seen; };
static struct hit hits[NPFX][HK_NROWS]; /* of the module being scanned (scan lock) */
static int16_t bucket[64], chain[HK_NROWS];

static unsigned hash6(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h & 63;
}

static void rows_index(void)
{
    static int done;
    if (done)
        return;
    memset(bucket, 0xff, sizeof bucket);
    for (int r = HK_NROWS - 1; r >= 0; r--) {
        unsigned h = hash6(hk_rows[r].name);
        chain[r] = bucket[h];
        bucket[h] = (int16_t)r;
    }
    done = 1;
}

struct mod {
    uintptr_t base;
    const char *path; /* the file to read */
    const char *name; /* for messages */
    const ElfW(Phdr) *phdr;
    int phnum, is_exe;
};

static int in_code(const struct mod *m, uintptr_t a, size_t size)
{
    for (int i = 0; i < m->phnum; i++) {
        const ElfW(Phdr) *ph = &m->phdr[i];
        uintptr_t lo = m->base + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && a >= lo && a + size <= lo + ph->p_memsz)
            return 1;
    }
    return 0;
}

static int table_of(int pf) { return pf == P_MI ? T_MI : pf == P_TC ? T_TC : T_STD; }

static void on_symbol(void *arg, const char *name, uint64_t value, uint64_t size, int dyn)
{
    const struct mod *m = arg;
    int pf = P_NONE;
    for (int k = 1; k < NPFX; k++)
        if (name[0] == PREFIX[k][0] && !strncmp(name, PREFIX[k], strlen(PREFIX[k])))
            pf = k;
    const char *rest = name + strlen(PREFIX[pf]);
    for (int r = bucket[hash6(rest)]; r >= 0; r = chain[r]) {
        if (hk_rows[r].table != table_of(pf) || strcmp(hk_rows[r].name, rest))
            continue;
        uintptr_t a = m->base + value;
        struct hit *h = &hits[pf][r];
        if (!in_code(m, a, size) || (h->seen && h->addr != a && !dyn))
            continue; /* outside the code, or a second (local) definition of an exported name */
        if (h->addr != a)
            h->size = 0;
        h->addr = a;
        h->size = size > h->size ? size : h->size;
        h->dyn |= (uint8_t)dyn;
        h->seen = 1;
    }
}

/* ---- one allocator ---- */

struct entry { int row; uintptr_t addr; size_t size; };
struct family {
    const char *alloc, *label; /* "jemalloc", "_rjem_*" */
    int pf;
    int guards_only; /* its malloc is the one the interposed malloc forwards to: counted there */
    struct entry e[HK_NROWS * 2];
    int n;
};

/* Add the rows found under prefix pf; names at an address already taken are one entry point. */
static void add_rows(struct family *f, int pf)
{
    for (int r = 0; r < HK_NROWS; r++) {
        const struct hit *h = &hits[pf][r];
        if (!h->seen || hk_rows[r].table != table_of(pf))
            continue;
        int dup = 0;
        for (int i = 0; i < f->n && !dup; i++)
            dup = f->e[i].addr == h->addr;
        if (!dup)
            f->e[f->n++] = (struct entry){r, h->addr, h->size};
    }
}

/* The family's forward table (family.h) for the seam's slow paths, from its rows. */
static void family_table(int s, int pf)
{
    static const int rows[3][6] = {
        {HK_STD_calloc, HK_STD_realloc, HK_STD_posix_memalign, HK_STD_aligned_alloc, HK_STD_memalign,
         HK_STD_malloc_usable_size},
        {HK_MI_calloc, HK_MI_realloc, HK_MI_posix_memalign, HK_MI_aligned_alloc, HK_MI_memalign, HK_MI_usable_size},
        {HK_TC_calloc, HK_TC_realloc, HK_TC_posix_memalign, HK_TC_memalign, HK_TC_memalign, HK_TC_malloc_size},
    };
    const int *r = rows[table_of(pf)];
    struct hk_slot *sl = &hk_slots[s];
    sl->fam.calloc = sl->orig[r[0]];
    sl->fam.realloc = sl->orig[r[1]];
    sl->fam.posix_memalign = sl->orig[r[2]];
    sl->fam.aligned_alloc = sl->orig[r[3]];
    sl->fam.memalign = sl->orig[r[4]];
    sl->fam.malloc_usable_size = sl->orig[r[5]];
    sl->fam.kind = ML_SRC_HOOKED;
    hk_slot_basics(s);
}

/* Is an allocator present under prefix pf: an allocating entry point and a free? (A program keeps
 * only the entry points it calls: Rust with tikv-jemallocator has _rjem_sdallocx but no _rjem_free,
 * with mimalloc mi_malloc_aligned but no mi_malloc.) */
static int present(int pf)
{
    int alloc = 0, free = 0;
    for (int r = 0; r < HK_NROWS; r++) {
        if (!hits[pf][r].seen || hk_rows[r].table != table_of(pf))
            continue;
        alloc |= hk_counts(&hk_rows[r]);
        free |= hk_rows[r].shape == SH_FREE;
    }
    return alloc && free;
}

/* Allocating entry points that call another one directly are not hooked (counted twice). */
static void drop_nested(struct family *f, uint8_t *skip)
{
    uintptr_t targets[HK_NROWS * 2];
    int nt = 0;
    for (int i = 0; i < f->n; i++)
        if (hk_counts(&hk_rows[f->e[i].row]))
            targets[nt++] = f->e[i].addr;
    for (int i = 0; i < f->n; i++)
        if (hk_counts(&hk_rows[f->e[i].row]) && f->e[i].size &&
            ml_patch_calls_any(f->e[i].addr, f->e[i].size, targets, nt))
            skip[i] = 1;
}

struct outcome { int hooked, nested, failed; const char *why, *what; };

/* The fast path patch.c emits for a row: the shapes whose size or pointer is the first argument. */
static struct ml_patch_fast fast_path(const struct hk_row *r)
{
    uintptr_t tp;
    __asm__("mov %%fs:0, %0" : "=r"(tp));
    intptr_t off = (intptr_t)((uintptr_t)&ml_tls.countdown - tp);
    struct ml_patch_fast f = {ML_FAST_NONE, (int32_t)off, &ml_range_base, &ml_range_span};
    if (off != (int32_t)off)
        return f;
    if (r->shape == SH_MALLOC || r->shape == SH_MALLOCX || r->shape == SH_ALIGNED)
        f.kind = ML_FAST_COUNT;
    else if (r->shape == SH_FREE)
        f.kind = ML_FAST_FREE;
    return f;
}

/* New patches' countdowns on or off as sampling is (before any jump leads there), again if a switch
 * (ml_hooks_sampling, which sees these patches already) came in between and was overwritten. */
static void sampling_as_now(int from, int to)
{
    int on;
    do {
        on = atomic_load(&ml_cfg.active);
        for (int i = from; i < to; i++)
            ml_patch_sampling(&patches[i], on);
    } while (on != atomic_load(&ml_cfg.active));
}

/* Plan every entry point of f into slot s; NULL, or why the allocator cannot be hooked. */
static const char *plan_family(struct family *f, int s, struct ml_patch *out, int *nout, struct outcome *o)
{
    uint8_t skip[HK_NROWS * 2] = {0};
    drop_nested(f, skip);
    int first = *nout;
    for (int i = 0; i < f->n; i++) {
        const struct entry *e = &f->e[i];
        hk_slots[s].orig[e->row] = (void *)e->addr;
        if (hk_rows[e->row].shape == SH_LOOKUP)
            continue; /* called by the hooks, never hooked */
        /* The interposed functions count its allocations already; its reallocating entry points
         * still get their guard (mi_realloc of a block of ours: mimalloc read no size in it and
         * copied nothing). */
        int guard_only = f->guards_only && hk_counts(&hk_rows[e->row]);
        void *hook = guard_only ? hk_guard(s, e->row) : hk_hook(s, e->row);
        if (!hook)
            continue;
        if (skip[i]) {
            o->nested++;
            continue;
        }
        const char *why = e->size ? NULL : "its symbol has no size";
        if (!why && *nout == MAX_PATCHES)
            why = "too many entry points hooked in this process";
        struct ml_patch_fast fast = fast_path(&hk_rows[e->row]);
        if (!why)
            why = ml_patch_plan(&out[*nout], e->addr, e->size, hook, guard_only ? NULL : &fast);
        if (why && !hk_counts(&hk_rows[e->row]) && e->size < 5 && ml_patch_inert(e->addr, e->size))
            continue; /* a stub that returns a constant: nothing to guard */
        if (why && hk_remembers(&hk_rows[e->row]))
            continue; /* no block reaches it: unhooked, its heaps are not remembered (hooks.c) */
        if (why && !hk_counts(&hk_rows[e->row])) {
            *nout = first;
            o->what = hk_rows[e->row].name;
            return why;
        }
        if (why) {
            o->failed++;
            o->why = why;
            o->what = hk_rows[e->row].name;
            continue;
        }
        hk_slots[s].orig[e->row] = out[*nout].tramp;
        out[*nout].counts = (uint8_t)(hk_counts(&hk_rows[e->row]) && !guard_only);
        out[*nout].guard = hk_guard(s, e->row);
        (*nout)++;
        o->hooked++;
    }
    return NULL;
}

/* Guards first: a block of ours must never meet an unhooked free. */
static int write_all(int from, int to)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = from; i < to; i++) {
            if (patches[i].counts == pass && ml_patch_write(&patches[i]) != 0)
                return -1;
        }
    return 0;
}

/* ---- the modules ---- */

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Libraries that hold no allocator of their own worth a look (and are large to read). */
static int system_library(const char *name)
{
    static const char *const skip[] = {"libc.so", "ld-linux", "libm.so", "libgcc_s.so", "libstdc++.so",
                                       "libpthread.so", "libdl.so", "librt.so", "linux-vdso", NULL};
    const char *b = base_name(name);
    for (int i = 0; skip[i]; i++)
        if (!strncmp(b, skip[i], strlen(skip[i])))
            return 1;
    return 0;
}

/* Say what was found (stderr once, and a note in the dump). */
static void say_found(const struct mod *m, const struct family *f, const struct outcome *o, int deferred)
{
    char line[512];
    struct ml_buf b = {line, 0, sizeof line};
    ml_buf_str(&b, "memlens: ");
    ml_buf_str(&b, m->name);
    ml_buf_str(&b, m->is_exe ? " allocates through " : " (a library) allocates through ");
    ml_buf_str(&b, f->alloc);
    ml_buf_str(&b, " linked into it (");
    ml_buf_str(&b, f->label);
    ml_buf_str(&b, deferred ? "): hooking " : "): hooked ");
    ml_buf_u64(&b, (uint64_t)o->hooked);
    ml_buf_str(&b, " entry points");
    if (f->guards_only)
        ml_buf_str(&b, " that take a pointer (its malloc is the one memlens interposes: counted there)");
    if (o->failed) {
        ml_buf_str(&b, "; ");
        ml_buf_u64(&b, (uint64_t)o->failed);
        ml_buf_str(&b, " not (");
        ml_buf_str(&b, o->what);
        ml_buf_str(&b, ": ");
        ml_buf_str(&b, o->why);
        ml_buf_str(&b, "): allocations through them are not sampled");
    }
    ml_note(1, line);
}

static void say_refused(const struct mod *m, const struct family *f, const char *what, const char *why)
{
    char line[512];
    struct ml_buf b = {line, 0, sizeof line};
    ml_buf_str(&b, "memlens: ");
    ml_buf_str(&b, m->name);
    ml_buf_str(&b, " allocates through ");
    ml_buf_str(&b, f->alloc);
    ml_buf_str(&b, " linked into it (");
    ml_buf_str(&b, f->label);
    ml_buf_str(&b, "), which memlens cannot hook: its ");
    ml_buf_str(&b, what);
    ml_buf_str(&b, ": ");
    ml_buf_str(&b, why);
    ml_buf_str(&b, ". Its allocations are missing from the profile");
    ml_note(1, line);
}

/* A module without symbols: name the allocator inside it by its strings, and say it is blind. */
static void check_stripped(const struct mod *m, int got)
{
    if (got & (ML_SYMS_SYMTAB | ML_SYMS_MINIDEBUG | ML_SYMS_DEBUGFILE | ML_SYMS_UNREADABLE))
        return;
    const struct hit *hm = &hits[P_NONE][HK_STD_malloc];
    if (hm->seen && hm->addr == (uintptr_t)ml_next.malloc)
        return; /* a preloaded stripped libjemalloc: its malloc is the one we interpose, and counted */
    static const char *const needles[] = {"<jemalloc>", "mimalloc: ", "MIMALLOC_", "tcmalloc: ", "TCMALLOC_", NULL};
    static const char *const names[] = {"jemalloc", "mimalloc", "mimalloc", "tcmalloc", "tcmalloc"};
    int k = ml_elf_contains(m->path, needles);
    if (k < 0)
        return;
    char line[512];
    struct ml_buf b = {line, 0, sizeof line};
    ml_buf_str(&b, "memlens: ");
    ml_buf_str(&b, m->name);
    ml_buf_str(&b, " contains ");
    ml_buf_str(&b, names[k]);
    ml_buf_str(&b, " (its strings) but no symbol table and no debug file");
    if (got & ML_SYMS_MINIDEBUG_UNREAD)
        ml_buf_str(&b, " memlens can read (its MiniDebugInfo needs liblzma.so.5)");
    ml_buf_str(&b, ": memlens cannot hook it, so what it allocates is missing from the profile (only "
                   "allocations through the C library's malloc are sampled). Install its debug file, or "
                   "profile a build with symbols");
    ml_note(1, line);
}

/* ---- files already read and found without an allocator to hook ---- */

/* A program that dlopens and dlcloses a library in a loop has it scanned at every dlopen (a module
 * dlclose'd is forgotten, and may come back at the same base): each scan maps the file and walks
 * its symbol tables, for a stripped one its MiniDebugInfo, debug file and strings too. A file
 * whose scan hooked nothing is remembered by what identifies its contents, so that a dlopen of it
 * again costs one stat. Those with an allocator are read again (a module loaded anew has its own
 * code to hook). Oldest forgotten first when full. */
#define CLEAN_MAX 256
struct file_id { dev_t dev; ino_t ino; off_t size; int64_t mtime_ns; };
static struct file_id clean[CLEAN_MAX];
static int nclean, clean_next;

static int file_id(const char *path, struct file_id *id)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    memset(id, 0, sizeof *id);
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    id->size = st.st_size;
    id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return 0;
}

static int known_clean(const struct file_id *id)
{
    for (int i = 0; i < nclean; i++)
        if (!memcmp(&clean[i], id, sizeof *id))
            return 1;
    return 0;
}

static void remember_clean(const struct file_id *id)
{
    clean[clean_next] = *id;
    clean_next = (clean_next + 1) % CLEAN_MAX;
    if (nclean < CLEAN_MAX)
        nclean++;
}

/* ---- the allocators of one module ---- */

static int hooks_family(const struct mod *m, struct family *f, enum ml_hook_mode mode);

/* The allocators of module m: planned into patches[], hooked now or left for memlens attach. */
static void scan_module(const struct mod *m, enum ml_hook_mode mode)
{
    struct file_id id;
    int have_id = !m->is_exe && file_id(m->path, &id) == 0;
    if (have_id && known_clean(&id))
        return;
    memset(hits, 0, sizeof hits);
    int got = ml_elf_symbols(m->path, on_symbol, (void *)m);
    static const char *const jlabel[] = {"malloc, free, mallocx, …", "je_*", "_rjem_*"};
    int found = 0, merged_std = 0;
    for (int pf = P_JE; pf <= P_TC; pf++) {
        if (!present(pf))
            continue;
        int mr = pf == P_MI ? HK_MI_malloc : pf == P_TC ? HK_TC_malloc : HK_STD_malloc;
        static struct family f;
        memset(&f, 0, sizeof f);
        f.pf = pf;
        f.alloc = pf == P_MI ? "mimalloc" : pf == P_TC ? "tcmalloc" : "jemalloc";
        f.label = pf == P_MI ? "mi_*" : pf == P_TC ? "tc_*" : jlabel[pf];
        add_rows(&f, pf);
        /* A preloaded libtcmalloc or libmimalloc: its tc_malloc / mi_malloc is the malloc our
         * interposed malloc forwards to. Hooking its allocating entry points counted every block
         * twice (1.8x the heap); its pointer-taking ones are still guarded (a tc_free of a block of
         * ours must not reach it). */
        f.guards_only = hits[pf][mr].seen && hits[pf][mr].addr == (uintptr_t)ml_next.malloc;
        /* The allocator also defines malloc itself (mimalloc's and gperftools' overrides). */
        if (hits[pf][mr].seen && hits[P_NONE][HK_STD_malloc].seen &&
            hits[P_NONE][HK_STD_malloc].addr == hits[pf][mr].addr) {
            add_rows(&f, P_NONE);
            merged_std = 1;
        }
        found += hooks_family(m, &f, mode);
    }
    const struct hit *hm = &hits[P_NONE][HK_STD_malloc], *hf = &hits[P_NONE][HK_STD_free];
    if (!merged_std && hm->seen && hf->seen && (m->is_exe || !hm->dyn)) {
        static struct family f;
        memset(&f, 0, sizeof f);
        f.pf = P_NONE;
        int je = hits[P_NONE][HK_STD_mallocx].seen;
        f.alloc = je ? "jemalloc" : "an allocator memlens does not know";
        f.label = je ? jlabel[0] : "malloc, free, …";
        add_rows(&f, P_NONE);
        found += hooks_family(m, &f, mode);
    }
    if (!found)
        check_stripped(m, got);
    if (!found && have_id)
        remember_clean(&id); /* what it had to say (a refusal, a stripped allocator) is said once */
}

static int hooks_family(const struct mod *m, struct family *f, enum ml_hook_mode mode)
{
    if (nslots == HK_SLOTS) {
        say_refused(m, f, "entry points", "memlens hooks at most 3 allocators linked into one process");
        return 0;
    }
    int s = nslots, from = npatches;
    struct outcome o = {0};
    memset(&hk_slots[s], 0, sizeof hk_slots[s]);
    const char *why = plan_family(f, s, patches, &npatches, &o);
    if (why) {
        say_refused(m, f, o.what ? o.what : "free", why);
        return 0;
    }
    family_table(s, f->pf);
    nslots++;
    sampling_as_now(from, npatches);
    if (mode == ML_HOOK_NOW && write_all(from, npatches) != 0) {
        say_refused(m, f, "code", "its pages cannot be written (/proc/self/mem and mprotect both refused)");
        npatches = from; /* guards that went in stay: they forward what is not ours */
        return 0;
    }
    /* Written now too: under attach, a library the loader's notification hooked (loadwatch.c) is
     * put back by memlens detach with the others. An entry is filled before it is counted. */
    for (int pass = 0; pass < 2; pass++) /* guards first, as write_all */
        for (int i = from; i < npatches; i++) {
            if (patches[i].counts != pass)
                continue;
            struct ml_pending_patch *q = &memlens_pending.p[memlens_pending.count];
            q->site = patches[i].site;
            q->len = patches[i].len;
            memcpy(q->code, patches[i].code, sizeof q->code);
            memcpy(q->old, patches[i].old, sizeof q->old);
            q->pad[0] = patches[i].counts;
            q->pad[1] = !patches[i].counts || patches[i].guard;
            __atomic_store_n(&memlens_pending.count, memlens_pending.count + 1, __ATOMIC_RELEASE);
        }
    if (mode == ML_HOOK_DEFER)
        atomic_store(&memlens_pending.state, 1);
    say_found(m, f, &o, mode == ML_HOOK_DEFER);
    return 1;
}

/* ---- every module ---- */

static struct mod mods[MAX_SCANNED];
static int nmods;
static char exe_path[4096], exe_name[256];

static uintptr_t self; /* the runtime's own load address (own_base) */

/* Found before dl_iterate_phdr, never in its callback: dladdr takes the loader's lock, and the
 * callback runs under its write lock, which a dlopen holding the loader's lock waits for (an attach
 * to a program dlopening in a loop deadlocked both threads there). */
static void own_base(void)
{
    Dl_info di;
    struct link_map *lm = NULL;
    if (!self && dladdr1((void *)&own_base, &di, (void **)&lm, RTLD_DL_LINKMAP) && lm)
        self = lm->l_addr;
}

static int list_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size, (void)arg;
    int first = nmods == 0 && nscanned == 0 && (!info->dlpi_name || !info->dlpi_name[0]);
    uintptr_t vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (info->dlpi_addr == self || info->dlpi_addr == (uintptr_t)getauxval(AT_BASE) ||
        (vdso && (uintptr_t)info->dlpi_phdr - vdso < 65536) || nmods == MAX_SCANNED)
        return 0;
    for (int i = 0; i < nscanned; i++)
        if (scanned[i] == info->dlpi_addr) {
            alive[i] = 1;
            return 0;
        }
    if (nscanned < MAX_SCANNED) {
        alive[nscanned] = 1;
        scanned[nscanned++] = info->dlpi_addr;
    }
    const char *name = info->dlpi_name;
    if (!first && (!name || !name[0] || system_library(name)))
        return 0;
    struct mod *m = &mods[nmods++];
    m->base = info->dlpi_addr;
    m->phdr = info->dlpi_phdr;
    m->phnum = info->dlpi_phnum;
    m->is_exe = first;
    m->path = first ? "/proc/self/exe" : name;
    m->name = first ? exe_name : base_name(name);
    return 0;
}

/* Modules no longer listed were dlclose'd: another may be loaded at the same base later. */
static void forget_unloaded(void)
{
    int k = 0;
    for (int i = 0; i < nscanned; i++)
        if (alive[i])
            scanned[k++] = scanned[i];
    nscanned = k;
}

static void exe_names(void)
{
    if (exe_name[0])
        return;
    ssize_t n = readlink("/proc/self/exe", exe_path, sizeof exe_path - 1);
    exe_path[n > 0 ? n : 0] = 0;
    const char *b = base_name(exe_path);
    size_t k = strlen(b) < sizeof exe_name - 1 ? strlen(b) : sizeof exe_name - 1;
    memcpy(exe_name, b[0] ? b : "the program", b[0] ? k : 11);
}

int ml_hooks_scan(enum ml_hook_mode mode, char *summary, size_t cap)
{
    ml_spin_lock(&scan_lock);
    rows_index();
    exe_names();
    own_base();
    int before = npatches, mark = ml_notes_count();
    nmods = 0;
    memset(alive, 0, sizeof alive);
    dl_iterate_phdr(list_module, NULL);
    forget_unloaded();
    for (int i = 0; i < nmods; i++)
        scan_module(&mods[i], mode);
    int n = npatches - before;
    if (summary)
        ml_notes_join(mark, summary, cap);
    if (mode == ML_HOOK_DEFER)
        ml_notes_join(mark, memlens_pending.summary, sizeof memlens_pending.summary);
    ml_spin_unlock(&scan_lock);
    if (mode == ML_HOOK_NOW && !ml_loader_context)
        ml_loader_watch(); /* at start (memlens run): libraries loaded later are scanned as they come */
    return n;
}

int ml_hooks_count(void) { return npatches; }

int ml_hooks_at_start(void)
{
    /* memlens attach dlopens the runtime from a memfd, as /proc/thread-self/fd/N; memlens run
     * preloads it from its cache directory. */
    Dl_info di;
    if (!dladdr((void *)&ml_hooks_at_start, &di) || !di.dli_fname)
        return 0;
    return strncmp(di.dli_fname, "/proc/", 6) != 0 && !strstr(di.dli_fname, "memfd:");
}

void ml_hooks_counting(int on)
{
    for (int i = 0; i < npatches; i++)
        if (patches[i].counts)
            ml_patch_retarget(&patches[i], on ? patches[i].hook : patches[i].guard ? patches[i].guard : patches[i].tramp);
}

void ml_hooks_sampling(int on)
{
    for (int i = 0; i < npatches; i++)
        ml_patch_sampling(&patches[i], on);
}

/* For the fast-path benchmark (runtime/bench/fastpath.c, FASTPATH_HOOKED): put the entry points'
 * original bytes back (0) or the jumps (1), so that one process times the bare allocator and the
 * hooked one in alternating blocks. Only while no other thread can be inside the allocator.
 * Returns the number of entry points written, or -1. */
ML_EXPORT int memlens_hooks_write(int on)
{
    for (int i = 0; i < npatches; i++) {
        struct ml_patch p = patches[i];
        if (!on)
            memcpy(p.code, p.old, p.len);
        if (ml_patch_write(&p) != 0)
            return -1;
    }
    return npatches;
}
