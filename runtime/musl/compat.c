/* What compat.h maps glibc's extensions to, in the musl build only (build.rs adds this file to
 * the musl runtime's sources; the glibc runtime never sees it). None of it allocates. */
#include <elf.h>
#include <stdint.h>
#include <sys/auxv.h>

#undef dl_iterate_phdr

struct find_ctx {
    uintptr_t pc;
    struct dl_find_object *fo;
    int found;
};

/* The module whose PT_LOAD segments hold pc: where its ELF header is mapped (file offset 0 of its
 * first segment), its end, and its PT_GNU_EH_FRAME, as glibc's _dl_find_object gives them. */
static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find_ctx *c = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0, eh = 0;
    int inside = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_GNU_EH_FRAME)
            eh = start;
        if (ph->p_type != PT_LOAD)
            continue;
        if (lo == UINTPTR_MAX)
            lo = start - ph->p_offset;
        if (start + ph->p_memsz > hi)
            hi = start + ph->p_memsz;
        inside |= c->pc - start < ph->p_memsz;
    }
    if (!inside)
        return 0;
    /* st_discover reads l_addr and l_name of the link map right away, on this thread. */
    static __thread struct link_map lm;
    lm.l_addr = info->dlpi_addr;
    lm.l_name = (char *)info->dlpi_name;
    *c->fo = (struct dl_find_object){
        .dlfo_map_start = (void *)lo,
        .dlfo_map_end = (void *)hi,
        .dlfo_link_map = &lm,
        .dlfo_eh_frame = (void *)eh,
    };
    c->found = 1;
    return 1;
}

int ml_musl_iterate_phdr(int (*fn)(struct dl_phdr_info *, size_t, void *), void *arg);

int _dl_find_object(void *pc, struct dl_find_object *fo)
{
    struct find_ctx c = {.pc = (uintptr_t)pc, .fo = fo};
    ml_musl_iterate_phdr(find_cb, &c);
    return c.found ? 0 : -1;
}

int ml_musl_dladdr1(const void *addr, Dl_info *info, void **extra, int flags)
{
    (void)flags;
    *extra = NULL;
    if (!dladdr(addr, info))
        return 0;
    /* musl's dlopen(NULL) returns the head of its module list at once; its modules begin with a
     * struct link_map's fields, and a module is also its dlsym handle. */
    for (struct link_map *lm = dlopen(NULL, RTLD_NOW | RTLD_NOLOAD); lm; lm = lm->l_next)
        if (lm->l_name == info->dli_fname ||
            (lm->l_name && info->dli_fname && !strcmp(lm->l_name, info->dli_fname))) {
            *extra = lm;
            break;
        }
    return 1;
}

struct iter_ctx {
    int (*fn)(struct dl_phdr_info *, size_t, void *);
    void *arg;
};

static int iter_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct iter_ctx *c = arg;
    if (info->dlpi_phdr != (const ElfW(Phdr) *)getauxval(AT_PHDR))
        return c->fn(info, size, c->arg);
    struct dl_phdr_info main_program = *info;
    main_program.dlpi_name = "";
    return c->fn(&main_program, size, c->arg);
}

int ml_musl_iterate_phdr(int (*fn)(struct dl_phdr_info *, size_t, void *), void *arg)
{
    struct iter_ctx c = {fn, arg};
    return dl_iterate_phdr(iter_cb, &c);
}

void **ml_musl_stack_end(void)
{
    static void *top;
    if (!top)
        top = (void *)getauxval(AT_EXECFN);
    return &top;
}

struct r_debug *ml_musl_r_debug(void)
{
    static struct r_debug r;
    r.r_map = dlopen(NULL, RTLD_NOW | RTLD_NOLOAD);
    return &r;
}
