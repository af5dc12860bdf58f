/* Loaded modules for the dump (dl_iterate_phdr: base, build id from the PT_NOTE in memory, PT_LOAD
 * segments), plus modules that were dlclose'd since start, remembered by the dlclose interposer (dlclose.c) so
 * samples taken in them can still be symbolized.
 *
 * The same records go into the state file's module table (state.h), which a reader uses once the
 * process is gone: every module loaded at start-up, then, as stacks are recorded, each module a new
 * stack's frames lie in and the table does not know yet (found with the lock-free
 * _dl_find_object: a dlopen'ed library appears at its first sampled frame), marked when dlclose'd. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/single_threaded.h>
#include <unistd.h>

#include "../base/out.h"
#include "../base/rdebug.h"
#include "../control/ctl.h"
#include "modules.h"
#include "state.h"

#define MAX_UNLOADED 256
#define MAX_SEGS 8

struct module {
    uintptr_t base;
    int nseg, idlen;
    unsigned char id[32];
    struct { uintptr_t vaddr, memsz, offset; unsigned flags; } seg[MAX_SEGS];
    char path[512];
};

static struct module unloaded[MAX_UNLOADED];
static int nunloaded;
static _Atomic int lock;
static _Atomic int st_lock; /* appending to the state file's module table (rare: a new module) */

/* Our lock, but never forever: a signal handler that dumps (or calls _exit) may have interrupted
 * this thread inside dlclose's remember(). Returns 0 if it was not taken. */
static int lock_bounded(void)
{
    for (int i = 0; atomic_exchange_explicit(&lock, 1, memory_order_acquire); i++) {
        if (i == 1000)
            return 0;
        usleep(100);
    }
    return 1;
}

static void capture(struct module *m, struct dl_phdr_info *info)
{
    m->base = info->dlpi_addr;
    m->nseg = 0;
    m->idlen = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && m->nseg < MAX_SEGS) {
            m->seg[m->nseg].vaddr = ph->p_vaddr;
            m->seg[m->nseg].memsz = ph->p_memsz;
            m->seg[m->nseg].offset = ph->p_offset;
            m->seg[m->nseg].flags = ph->p_flags;
            m->nseg++;
        } else if (ph->p_type == PT_NOTE && !m->idlen) {
            const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
            while (p + sizeof(ElfW(Nhdr)) <= end) {
                const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
                const char *name = p + sizeof *nh;
                const unsigned char *desc = (const unsigned char *)name + ((nh->n_namesz + 3) & ~3u);
                if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4) &&
                    nh->n_descsz <= sizeof m->id) {
                    memcpy(m->id, desc, nh->n_descsz);
                    m->idlen = (int)nh->n_descsz;
                    break;
                }
                p = (const char *)desc + ((nh->n_descsz + 3) & ~3u);
            }
        }
    }
    const char *name = info->dlpi_name;
    if (!name || !*name) { /* the main program: read its path straight into the record */
        ssize_t n = readlink("/proc/self/exe", m->path, sizeof m->path - 1);
        m->path[n > 0 ? n : 0] = 0;
        return;
    }
    size_t len = strlen(name);
    if (len >= sizeof m->path)
        len = sizeof m->path - 1;
    memcpy(m->path, name, len);
    m->path[len] = 0;
}

static void write_module(struct ml_out *o, const struct module *m, const char *state)
{
    ml_out_str(o, "module ");
    ml_out_hex(o, m->base);
    ml_out_str(o, " ");
    if (!m->idlen)
        ml_out_str(o, "-");
    for (int i = 0; i < m->idlen; i++) {
        char hx[3] = {"0123456789abcdef"[m->id[i] >> 4], "0123456789abcdef"[m->id[i] & 15], 0};
        ml_out_str(o, hx);
    }
    ml_out_str(o, " ");
    ml_out_str(o, state);
    ml_out_str(o, " ");
    ml_out_path(o, m->path);
    ml_out_str(o, "\n");
    for (int i = 0; i < m->nseg; i++) {
        char fl[4] = {m->seg[i].flags & PF_R ? 'r' : '-', m->seg[i].flags & PF_W ? 'w' : '-',
                      m->seg[i].flags & PF_X ? 'x' : '-', 0};
        ml_out_str(o, "segment ");
        ml_out_hex(o, m->seg[i].vaddr);
        ml_out_str(o, " ");
        ml_out_hex(o, m->seg[i].memsz);
        ml_out_str(o, " ");
        ml_out_hex(o, m->seg[i].offset);
        ml_out_str(o, " ");
        ml_out_str(o, fl);
        ml_out_str(o, "\n");
    }
}

struct write_ctx {
    struct ml_out *o;
    char still_loaded[MAX_UNLOADED];
};

static int write_loaded(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct write_ctx *c = arg;
    static struct module m; /* only dumps come here, one at a time (dump lock): off the stack */
    capture(&m, info);
    if (!m.nseg)
        return 0;
    write_module(c->o, &m, "loaded");
    if (!lock_bounded())
        return 0;
    for (int i = 0; i < nunloaded; i++)
        if (unloaded[i].base == m.base && !strcmp(unloaded[i].path, m.path))
            c->still_loaded[i] = 1;
    ml_spin_unlock(&lock);
    return 0;
}

/* dl_iterate_phdr without the loader's lock, for a single-threaded process: a fork child inherits
 * that lock as it was, and if another thread of the parent held it, dl_iterate_phdr would wait
 * forever. With one thread nobody can change the list while we read it; each module's program
 * headers are found from its first mapping (its ELF header) via the lock-free _dl_find_object. */
static void iterate_single_threaded(int (*fn)(struct dl_phdr_info *, size_t, void *), void *arg)
{
    for (struct link_map *lm = ml_r_debug()->r_map; lm; lm = lm->l_next) {
        struct dl_find_object fo;
        if (!lm->l_ld || _dl_find_object((void *)lm->l_ld, &fo) != 0 || !fo.dlfo_map_start)
            continue;
        const ElfW(Ehdr) *eh = fo.dlfo_map_start;
        if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
            continue;
        struct dl_phdr_info info = {
            .dlpi_addr = lm->l_addr,
            .dlpi_name = lm->l_name,
            .dlpi_phdr = (const ElfW(Phdr) *)((const char *)eh + eh->e_phoff),
            .dlpi_phnum = eh->e_phnum,
        };
        if (fn(&info, sizeof info, arg))
            return;
    }
}

/* Threads of this process (entries of /proc/self/task), or a large number if unknown. */
static int count_threads(void)
{
    int dfd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC), n = 0;
    if (dfd < 0)
        return 1 << 30;
    char ents[1024] __attribute__((aligned(8)));
    long got;
    while ((got = syscall(SYS_getdents64, dfd, ents, sizeof ents)) > 0)
        for (long off = 0; off < got;) {
            struct dirent64 *d = (struct dirent64 *)(ents + off);
            off += d->d_reclen;
            n += d->d_name[0] != '.';
        }
    close(dfd);
    return n;
}

/* Nobody but this thread can be loading or unloading code: the program has one thread, or two of
 * which the other is our control thread (a fork child that lived long enough runs one). */
static int alone(void)
{
    if (__libc_single_threaded)
        return 1;
    return count_threads() <= 1 + (ml_ctl_thread_running && ml_ctl_thread_running());
}

void ml_modules_write(struct ml_out *o)
{
    struct write_ctx c = {.o = o};
    /* Lock order is always loader lock, then ours (dlclose takes them that way too). In a fork
     * child the loader's lock may have been inherited held: without other threads it is not
     * needed. */
    if (ml_cfg.is_fork_child && alone())
        iterate_single_threaded(write_loaded, &c);
    else
        dl_iterate_phdr(write_loaded, &c);
    if (!lock_bounded())
        return;
    for (int i = 0; i < nunloaded; i++)
        if (!c.still_loaded[i])
            write_module(o, &unloaded[i], "unloaded");
    ml_spin_unlock(&lock);
}

struct find_ctx {
    uintptr_t base;
    const char *name;
};

static int remember(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find_ctx *f = arg;
    if (info->dlpi_addr != f->base || !info->dlpi_name || strcmp(info->dlpi_name, f->name))
        return 0;
    struct module m;
    capture(&m, info);
    ml_spin_lock(&lock);
    int known = 0;
    for (int i = 0; i < nunloaded && !known; i++)
        known = unloaded[i].base == m.base && !strcmp(unloaded[i].path, m.path) &&
                unloaded[i].idlen == m.idlen && !memcmp(unloaded[i].id, m.id, (size_t)m.idlen);
    if (!known && nunloaded < MAX_UNLOADED)
        unloaded[nunloaded++] = m;
    ml_spin_unlock(&lock);
    ml_state_module_unloaded(m.base, m.path);
    return 1;
}

void ml_modules_unloading(void *handle)
{
    struct link_map *lm = NULL;
    /* Not declared nonnull here (dlclose is): a NULL from a buggy caller is tested, not assumed away. */
    if (handle && dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) {
        struct find_ctx f = {lm->l_addr, lm->l_name};
        ml_tls.busy++;
        dl_iterate_phdr(remember, &f);
        ml_tls.busy--;
    }
}

void ml_modules_reset_lock(void)
{
    atomic_store(&lock, 0);
    atomic_store(&st_lock, 0);
}

/* ---- the state file's module table ---- */

static void st_fill(struct ml_state_module *e, const struct module *m)
{
    e->base = m->base;
    e->nseg = (uint32_t)m->nseg;
    e->idlen = (uint32_t)m->idlen;
    memcpy(e->id, m->id, sizeof e->id);
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < m->nseg && i < ML_STATE_SEGS; i++) {
        e->seg[i].vaddr = m->seg[i].vaddr;
        e->seg[i].memsz = m->seg[i].memsz;
        e->seg[i].offset = m->seg[i].offset;
        e->seg[i].flags = m->seg[i].flags;
        if (m->base + m->seg[i].vaddr < lo)
            lo = m->base + m->seg[i].vaddr;
        if (m->base + m->seg[i].vaddr + m->seg[i].memsz > hi)
            hi = m->base + m->seg[i].vaddr + m->seg[i].memsz;
    }
    e->lo = lo;
    e->hi = hi;
    memcpy(e->path, m->path, sizeof e->path);
}

/* The table's entry of a loaded module holding pc, or -1. */
static int st_find(uintptr_t pc)
{
    uint32_t n = atomic_load_explicit(&ml_st->nmodules, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        const struct ml_state_module *e = &ml_st_modules[i];
        if (atomic_load_explicit((_Atomic uint32_t *)&e->state, memory_order_acquire) == 1 && pc >= e->lo &&
            pc < e->hi)
            return (int)i;
    }
    return -1;
}

/* Append module `m` unless the table has it (loaded, same base and path). */
static void st_add(const struct module *m)
{
    if (!m->nseg || !ml_st_modules)
        return;
    ml_spin_lock(&st_lock);
    uint32_t n = atomic_load(&ml_st->nmodules);
    int known = 0;
    for (uint32_t i = 0; i < n && !known; i++)
        known = ml_st_modules[i].state == 1 && ml_st_modules[i].base == m->base &&
                !strcmp(ml_st_modules[i].path, m->path);
    if (!known && n < ml_st->modules_cap && ml_state_modules_room(n + 1) == 0) {
        struct ml_state_module *e = &ml_st_modules[n];
        st_fill(e, m);
        atomic_store_explicit((_Atomic uint32_t *)&e->state, 1, memory_order_release);
        atomic_store_explicit(&ml_st->nmodules, n + 1, memory_order_release);
    }
    ml_spin_unlock(&st_lock);
}

static int st_add_info(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    static struct module m; /* under st_add's callers: the constructor, or one new record at a time */
    capture(&m, info);
    st_add(&m);
    return 0;
}

void ml_state_modules_init(void) { dl_iterate_phdr(st_add_info, NULL); }

/* The module holding pc, found without the loader's lock, into the table. */
static void st_discover(uintptr_t pc)
{
    struct dl_find_object fo;
    if (_dl_find_object((void *)pc, &fo) != 0 || !fo.dlfo_map_start || !fo.dlfo_link_map)
        return;
    const ElfW(Ehdr) *eh = fo.dlfo_map_start;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
        return;
    struct link_map *lm = fo.dlfo_link_map;
    struct dl_phdr_info info = {
        .dlpi_addr = lm->l_addr,
        .dlpi_name = lm->l_name,
        .dlpi_phdr = (const ElfW(Phdr) *)((const char *)eh + eh->e_phoff),
        .dlpi_phnum = eh->e_phnum,
    };
    static _Atomic int busy; /* one discovery at a time shares the static record below */
    if (atomic_exchange(&busy, 1))
        return;
    static struct module m;
    capture(&m, &info);
    st_add(&m);
    atomic_store(&busy, 0);
}

void ml_state_modules_note(const uintptr_t *pcs, int depth)
{
    int last = -1;
    for (int i = 0; i < depth; i++) {
        uintptr_t pc = pcs[i] - 1; /* a return address: its call is in the module */
        if (last >= 0 && pc >= ml_st_modules[last].lo && pc < ml_st_modules[last].hi)
            continue;
        last = st_find(pc);
        if (last < 0) {
            st_discover(pc);
            last = st_find(pc);
        }
    }
}

void ml_state_module_unloaded(uintptr_t base, const char *path)
{
    if (!ml_st_modules)
        return;
    ml_spin_lock(&st_lock);
    uint32_t n = atomic_load(&ml_st->nmodules);
    for (uint32_t i = 0; i < n; i++)
        if (ml_st_modules[i].state == 1 && ml_st_modules[i].base == base && !strcmp(ml_st_modules[i].path, path))
            atomic_store_explicit((_Atomic uint32_t *)&ml_st_modules[i].state, 2, memory_order_release);
    ml_spin_unlock(&st_lock);
}
