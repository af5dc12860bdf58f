/* Loaded modules for the dump (dl_iterate_phdr: base, build id from the PT_NOTE in memory, PT_LOAD
 * segments), plus modules that were dlclose'd since start, remembered by the dlclose interposer so
 * samples taken in them can still be symbolized. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/single_threaded.h>
#include <unistd.h>

#include "rt.h"

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
static int (*real_dlclose)(void *);

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
    for (struct link_map *lm = _r_debug.r_map; lm; lm = lm->l_next) {
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

extern int ml_ctl_thread_running(void) __attribute__((weak));

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
    return 1;
}

ML_EXPORT int dlclose(void *handle)
{
    if (!real_dlclose)
        real_dlclose = (int (*)(void *))dlsym(RTLD_NEXT, "dlclose");
    struct link_map *lm = NULL;
    void *h = handle;
    __asm__("" : "+r"(h)); /* dlclose is declared nonnull, but a NULL from a buggy caller must not crash here */
    if (h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) {
        struct find_ctx f = {lm->l_addr, lm->l_name};
        ml_tls.busy++;
        dl_iterate_phdr(remember, &f);
        ml_tls.busy--;
    }
    int r = real_dlclose(handle);
    ml_dwarf_code_unloaded();
    return r;
}

void ml_modules_reset_lock(void) { atomic_store(&lock, 0); }
