/* GOT patching, for a runtime loaded into a running process by `memlens attach`.
 *
 * Loaded with dlopen, the runtime interposes nothing: every module's relocations were bound to the
 * allocator before we came. So we rewrite them: in each loaded module, the JUMP_SLOT, GLOB_DAT and
 * absolute (R_X86_64_64) relocations naming a malloc-family function, libc's own included (libc
 * calls malloc and free through its GOT). A slot is changed only if it holds what the loader bound
 * it to (or, under lazy binding, the module's own PLT stub): a slot someone else rewrote is left
 * alone. Pages under RELRO are made writable for the store and read-only again right after.
 *
 * Not patched: ld.so (it has no such relocations; since glibc 2.32 it calls malloc through pointers
 * set at start-up, so its own allocations stay invisible), the vdso, and ourselves. */
#define _GNU_SOURCE
#include <errno.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "../store/modules.h"
#include "got.h"

struct ml_hook ml_hooks[] = {
    {"free", ML_HOOK_FREE, 0, 0},
    {"realloc", ML_HOOK_FREE, 0, 0},
    {"reallocarray", ML_HOOK_FREE, 0, 0},
    {"malloc_usable_size", ML_HOOK_FREE, 0, 0},
    {"dlclose", ML_HOOK_FREE, 0, 0}, /* keeps the dwarf unwinder's rules honest; never removed */
    {"malloc", ML_HOOK_ALLOC, 0, 0},
    {"calloc", ML_HOOK_ALLOC, 0, 0},
    {"posix_memalign", ML_HOOK_ALLOC, 0, 0},
    {"aligned_alloc", ML_HOOK_ALLOC, 0, 0},
    {"memalign", ML_HOOK_ALLOC, 0, 0},
    {"valloc", ML_HOOK_ALLOC, 0, 0},
    {"pvalloc", ML_HOOK_ALLOC, 0, 0},
};
const int ml_nhooks = sizeof ml_hooks / sizeof ml_hooks[0];

static uintptr_t self_base, exe_lo, exe_hi;
/* The program defines the malloc family itself (an allocator linked in): no GOT slot is patched,
 * its entry points are hooked instead (finder.c), and everyone's calls reach them (a slot
 * patched to our realloc as well would count a realloc twice). Only dlclose is patched. */
static int static_allocator;

int ml_got_static_allocator(void) { return static_allocator; }

static int in_exe(const void *p) { return (uintptr_t)p - exe_lo < exe_hi - exe_lo; }

/* The main program's address span (first module of dl_iterate_phdr). */
static int find_exe(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size, (void)arg;
    exe_lo = UINTPTR_MAX;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        exe_lo = lo < exe_lo ? lo : exe_lo;
        exe_hi = hi > exe_hi ? hi : exe_hi;
    }
    return 1;
}

/* Modules other than the main program, in search order, for when the global lookup lands on a
 * non-PIE program's canonical PLT entry (calling that would come back to us once patched). */
struct names { int n; const char *name[64]; };
static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct names *ns = arg;
    if (info->dlpi_name && info->dlpi_name[0] && info->dlpi_addr != self_base && ns->n < 64)
        ns->name[ns->n++] = info->dlpi_name;
    return 0;
}

static void *definition(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p || !in_exe(p))
        return p;
    struct names ns = {0};
    dl_iterate_phdr(collect, &ns);
    for (int i = 0; i < ns.n; i++) {
        void *h = dlopen(ns.name[i], RTLD_NOLOAD | RTLD_LAZY);
        void *q = h ? dlsym(h, name) : NULL;
        if (h)
            dlclose(h);
        if (q && !in_exe(q))
            return q;
    }
    return p;
}

const char *ml_got_resolve(void)
{
    Dl_info di;
    struct link_map *self = NULL;
    if (!dladdr1((void *)&ml_got_resolve, &di, (void **)&self, RTLD_DL_LINKMAP) || !self)
        return "cannot find the runtime's own module";
    self_base = self->l_addr;
    dl_iterate_phdr(find_exe, NULL);
    for (int i = 0; i < ml_nhooks; i++) {
        struct ml_hook *h = &ml_hooks[i];
        /* Our own definitions: a lookup in our handle searches us first. (`&malloc` in this file
         * would go through our GOT and name libc's.) */
        h->ours = dlsym(self, h->name);
        h->real = definition(h->name);
        if (!h->ours)
            return "the runtime lacks one of its own functions";
        if (!h->real) {
            if (h->side == ML_HOOK_ALLOC || !strcmp(h->name, "free") || !strcmp(h->name, "realloc"))
                return "the program has no malloc family to attach to";
            continue; /* e.g. no reallocarray in an old libc: nothing binds to it either */
        }
        if (in_exe(h->real) && strcmp(h->name, "dlclose"))
            static_allocator = 1;
    }
    return NULL;
}

/* ---- one module ---- */

struct module {
    uintptr_t base;
    const char *name; /* the loader's path ("" for the main program) */
    const ElfW(Sym) *symtab;
    const char *strtab;
    uintptr_t relro_lo, relro_hi; /* page-aligned span mprotect'ed read-only by the loader */
    const ElfW(Phdr) *phdr;
    int phnum;
};

static uintptr_t dyn_ptr(uintptr_t base, ElfW(Addr) v) { return v < base ? base + v : v; }

/* A lazily bound slot still points into its own module's code (the PLT stub). */
static int own_code(const struct module *m, uintptr_t v)
{
    for (int i = 0; i < m->phnum; i++) {
        const ElfW(Phdr) *ph = &m->phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && v - (m->base + ph->p_vaddr) < ph->p_memsz)
            return 1;
    }
    return 0;
}

/* The slot a pass could not patch, for the message that says so (ml_got_failure). */
static struct { const char *name; uintptr_t page; int err; } failed;

static int store(const struct module *m, void **slot, void *v)
{
    uintptr_t a = (uintptr_t)slot, page = a & ~(uintptr_t)4095;
    if (a >= m->relro_lo && a < m->relro_hi) {
        if (mprotect((void *)page, 4096, PROT_READ | PROT_WRITE) != 0) {
            failed.err = errno;
            failed.name = m->name;
            failed.page = page;
            return -1;
        }
        __atomic_store_n(slot, v, __ATOMIC_RELEASE);
        mprotect((void *)page, 4096, PROT_READ);
        return 0;
    }
    __atomic_store_n(slot, v, __ATOMIC_RELEASE);
    return 0;
}

static struct ml_hook *hook_named(const char *name)
{
    if (name[0] != 'f' && name[0] != 'r' && name[0] != 'm' && name[0] != 'd' && name[0] != 'c' &&
        name[0] != 'p' && name[0] != 'a' && name[0] != 'v')
        return NULL;
    for (int i = 0; i < ml_nhooks; i++)
        if (!strcmp(ml_hooks[i].name, name))
            return &ml_hooks[i];
    return NULL;
}

static int apply_rela(const struct module *m, const ElfW(Rela) *r, size_t n, enum ml_got_op op)
{
    int changed = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned type = ELF64_R_TYPE(r[i].r_info), sym = ELF64_R_SYM(r[i].r_info);
        if (!sym || (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT &&
                     !(type == R_X86_64_64 && r[i].r_addend == 0)))
            continue;
        struct ml_hook *h = hook_named(m->strtab + m->symtab[sym].st_name);
        if (!h || !h->real || (static_allocator && strcmp(h->name, "dlclose")))
            continue;
        void **slot = (void **)(m->base + r[i].r_offset);
        void *v = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        void *to;
        if (op == ML_GOT_UNHOOK) {
            if (h->side != ML_HOOK_ALLOC || v != h->ours)
                continue;
            to = h->real;
        } else {
            if (h->side != (op == ML_GOT_FREE ? ML_HOOK_FREE : ML_HOOK_ALLOC))
                continue;
            if (v != h->real && !(type == R_X86_64_JUMP_SLOT && own_code(m, (uintptr_t)v)))
                continue;
            to = h->ours;
        }
        if (store(m, slot, to) != 0)
            return -1;
        changed++;
    }
    return changed;
}

static int skip(const struct dl_phdr_info *info)
{
    uintptr_t vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (info->dlpi_addr == self_base)
        return 1;
    if (vdso && (uintptr_t)info->dlpi_phdr - vdso < 65536)
        return 1;
    return info->dlpi_addr == (uintptr_t)getauxval(AT_BASE); /* ld.so */
}

/* The modules a pass may patch. dl_iterate_phdr lists a module as soon as dlopen has mapped it,
 * before its relocations are written: a pass that visits it then finds its free slots unrelocated
 * (left alone) and, a moment later, its malloc slot relocated (hooked) -- a sampled block would
 * reach the real realloc -- and may make its RELRO page read-only under the loader's feet. So a
 * pass first lists the modules, then waits for the loader lock once (dladdr takes it: any dlopen
 * under way then has finished relocating what it mapped), and patches only the listed modules,
 * provided nothing was unloaded meanwhile (a new module at a listed address would be a stranger). */
#define SNAP_MAX 1024
struct snapshot { unsigned long long subs; int n, overflow; uintptr_t addr[SNAP_MAX]; };

static int take(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct snapshot *sn = arg;
    sn->subs = info->dlpi_subs;
    if (sn->n < SNAP_MAX)
        sn->addr[sn->n++] = info->dlpi_addr;
    else
        sn->overflow = 1;
    return 0;
}

static int listed(const struct snapshot *sn, uintptr_t addr)
{
    for (int i = 0; i < sn->n; i++)
        if (sn->addr[i] == addr)
            return 1;
    return 0;
}

static int ml_got_retry_flag;

int ml_got_retry(void) { return ml_got_retry_flag; }

struct pass { enum ml_got_op op; int changed, failed, retry; const struct snapshot *sn; };

static int each_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct pass *ps = arg;
    if (skip(info))
        return 0;
    if (ps->sn && info->dlpi_subs != ps->sn->subs) {
        ps->retry = 1; /* something was unloaded since the list: redo the whole pass later */
        return 1;
    }
    if (ps->sn && !listed(ps->sn, info->dlpi_addr)) {
        ps->retry = 1; /* mapped after the list, maybe not relocated yet: the next pass */
        return 0;
    }
    struct module m = {.base = info->dlpi_addr, .name = info->dlpi_name ? info->dlpi_name : "",
                       .phdr = info->dlpi_phdr, .phnum = info->dlpi_phnum};
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(m.base + ph->p_vaddr);
        else if (ph->p_type == PT_GNU_RELRO) {
            m.relro_lo = (m.base + ph->p_vaddr) & ~(uintptr_t)4095;
            m.relro_hi = (m.base + ph->p_vaddr + ph->p_memsz) & ~(uintptr_t)4095;
        }
    }
    if (!dyn)
        return 0;
    const ElfW(Rela) *rela = NULL, *jmprel = NULL;
    size_t relasz = 0, pltsz = 0;
    long pltrel = DT_RELA;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: m.symtab = (const ElfW(Sym) *)dyn_ptr(m.base, dyn->d_un.d_ptr); break;
        case DT_STRTAB: m.strtab = (const char *)dyn_ptr(m.base, dyn->d_un.d_ptr); break;
        case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(m.base, dyn->d_un.d_ptr); break;
        case DT_RELASZ: relasz = dyn->d_un.d_val; break;
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_ptr(m.base, dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: pltsz = dyn->d_un.d_val; break;
        case DT_PLTREL: pltrel = (long)dyn->d_un.d_val; break;
        }
    }
    if (!m.symtab || !m.strtab || pltrel != DT_RELA) /* x86-64 uses RELA only */
        return 0;
    /* An allocation pass does this module's free side first, in the same visit: a module loaded
     * between a free pass and an allocation pass must not get its malloc hooked with its free not. */
    enum ml_got_op ops[2] = {ps->op == ML_GOT_ALLOC ? ML_GOT_FREE : ps->op, ps->op};
    for (int k = ps->op == ML_GOT_ALLOC ? 0 : 1; k < 2; k++) {
        int a = rela ? apply_rela(&m, rela, relasz / sizeof *rela, ops[k]) : 0;
        int b = jmprel ? apply_rela(&m, jmprel, pltsz / sizeof *jmprel, ops[k]) : 0;
        if (a < 0 || b < 0) {
            ps->failed = 1;
            return 0; /* no allocation hook in a module whose free side failed */
        }
        ps->changed += a + b;
    }
    return 0;
}

int ml_got_apply(enum ml_got_op op)
{
    struct pass ps = {op, 0, 0, 0, NULL};
    struct snapshot sn; /* 8 KiB: every caller runs on a thread of its own with a full stack */
    if (op != ML_GOT_UNHOOK) {
        /* Unhooking only puts back slots that hold ours, which no half-loaded module has. */
        sn.n = sn.overflow = 0;
        dl_iterate_phdr(take, &sn);
        Dl_info di;
        dladdr((void *)&ml_got_apply, &di); /* the barrier: takes and drops the loader lock */
        ps.sn = &sn;
        ps.retry = sn.overflow;
    }
    dl_iterate_phdr(each_module, &ps);
    ml_got_retry_flag = ps.retry;
    return ps.failed ? -1 : ps.changed;
}

static int first_adds(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    *(unsigned long long *)arg = info->dlpi_adds;
    return 1;
}

unsigned long long ml_got_adds(void)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(first_adds, &adds);
    return adds;
}

void ml_got_failure(const char **module, uintptr_t *page, int *err)
{
    *module = failed.name && failed.name[0] ? failed.name : "the program";
    *page = failed.page;
    *err = failed.err;
}
