/* The symbol tables of a module's file (elfsym.h). A file is mapped read-only whole (its pages
 * come from the page cache; nothing is copied) and its section headers walked; every check keeps
 * offsets inside the mapping, since the file is not ours and may be truncated or hostile. */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "elfsym.h"

struct image { const uint8_t *p; size_t n; };

static int map_file(const char *path, struct image *im)
{
    im->p = NULL;
    im->n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return -1;
    im->p = p;
    im->n = (size_t)st.st_size;
    return 0;
}

static void unmap(struct image *im)
{
    if (im->p)
        munmap((void *)im->p, im->n);
    im->p = NULL;
}

static int inside(const struct image *im, uint64_t off, uint64_t len)
{
    return off <= im->n && len <= im->n - off;
}

static const Elf64_Ehdr *ehdr(const struct image *im)
{
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)im->p;
    if (im->n < sizeof *e || memcmp(e->e_ident, ELFMAG, SELFMAG) || e->e_ident[EI_CLASS] != ELFCLASS64 ||
        e->e_shentsize != sizeof(Elf64_Shdr) || !inside(im, e->e_shoff, (uint64_t)e->e_shnum * sizeof(Elf64_Shdr)))
        return NULL;
    return e;
}

static const Elf64_Shdr *shdrs(const struct image *im) { return (const Elf64_Shdr *)(im->p + ehdr(im)->e_shoff); }

/* The section named `name`, or NULL. */
static const Elf64_Shdr *section(const struct image *im, const char *name)
{
    const Elf64_Ehdr *e = ehdr(im);
    if (!e || e->e_shstrndx >= e->e_shnum)
        return NULL;
    const Elf64_Shdr *sh = shdrs(im), *str = &sh[e->e_shstrndx];
    if (!inside(im, str->sh_offset, str->sh_size))
        return NULL;
    for (int i = 0; i < e->e_shnum; i++)
        if (sh[i].sh_name < str->sh_size &&
            !strncmp((const char *)im->p + str->sh_offset + sh[i].sh_name, name, str->sh_size - sh[i].sh_name))
            return &sh[i];
    return NULL;
}

/* Every defined function in the symbol table of type `type`. Returns 1 if the table exists. */
static int symbols(const struct image *im, uint32_t type, ml_sym_fn fn, void *arg)
{
    const Elf64_Ehdr *e = ehdr(im);
    if (!e)
        return 0;
    const Elf64_Shdr *sh = shdrs(im);
    for (int i = 0; i < e->e_shnum; i++) {
        if (sh[i].sh_type != type || sh[i].sh_link >= e->e_shnum || sh[i].sh_type == SHT_NOBITS)
            continue;
        const Elf64_Shdr *str = &sh[sh[i].sh_link];
        if (!inside(im, sh[i].sh_offset, sh[i].sh_size) || !inside(im, str->sh_offset, str->sh_size))
            return 0;
        const Elf64_Sym *s = (const Elf64_Sym *)(im->p + sh[i].sh_offset);
        const char *names = (const char *)im->p + str->sh_offset;
        for (size_t k = 0; k < sh[i].sh_size / sizeof *s; k++) {
            /* Functions only: an ifunc's value is its resolver, not the function. */
            if (ELF64_ST_TYPE(s[k].st_info) != STT_FUNC || s[k].st_shndx == SHN_UNDEF || !s[k].st_value ||
                s[k].st_name >= str->sh_size || !memchr(names + s[k].st_name, 0, str->sh_size - s[k].st_name))
                continue;
            fn(arg, names + s[k].st_name, s[k].st_value, s[k].st_size, type == SHT_DYNSYM);
        }
        return 1;
    }
    return 0;
}

/* ---- the debug data of a stripped file ---- */

static const char *DEBUG_ROOT = "/usr/lib/debug";

static int build_id(const struct image *im, char *hex, size_t cap)
{
    const Elf64_Shdr *s = section(im, ".note.gnu.build-id");
    if (!s || !inside(im, s->sh_offset, s->sh_size) || s->sh_size < sizeof(Elf64_Nhdr))
        return -1;
    const Elf64_Nhdr *nh = (const Elf64_Nhdr *)(im->p + s->sh_offset);
    size_t desc = sizeof *nh + ((nh->n_namesz + 3) & ~3u);
    if (nh->n_type != NT_GNU_BUILD_ID || nh->n_descsz < 2 || desc + nh->n_descsz > s->sh_size ||
        nh->n_descsz * 2 + 1 > cap)
        return -1;
    const uint8_t *id = im->p + s->sh_offset + desc;
    static const char dig[] = "0123456789abcdef";
    for (size_t i = 0; i < nh->n_descsz; i++) {
        hex[2 * i] = dig[id[i] >> 4];
        hex[2 * i + 1] = dig[id[i] & 15];
    }
    hex[2 * nh->n_descsz] = 0;
    return 0;
}

/* Append strings to a path buffer; returns the buffer, or NULL if it would not fit. */
static char *join(char *buf, size_t cap, const char *a, const char *b, const char *c, const char *d)
{
    const char *parts[4] = {a, b, c, d};
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        size_t k = parts[i] ? strlen(parts[i]) : 0;
        if (n + k + 1 > cap)
            return NULL;
        memcpy(buf + n, parts[i], k);
        n += k;
    }
    buf[n] = 0;
    return buf;
}

/* The separate debug file: /usr/lib/debug/.build-id/xx/rest.debug, else by .gnu_debuglink next
 * to the file, in its .debug/, or under /usr/lib/debug/<its directory>/ (gdb's order). */
static int open_debug_file(const struct image *im, const char *path, struct image *out)
{
    char hex[130], p[4096], dir[4096], real[4096];
    if (build_id(im, hex, sizeof hex) == 0) {
        char two[3] = {hex[0], hex[1], 0};
        if (join(p, sizeof p, DEBUG_ROOT, "/.build-id/", two, "/") && join(dir, sizeof dir, p, hex + 2, ".debug", NULL) &&
            map_file(dir, out) == 0)
            return 0;
    }
    const Elf64_Shdr *s = section(im, ".gnu_debuglink");
    if (!s || !inside(im, s->sh_offset, s->sh_size) || !memchr(im->p + s->sh_offset, 0, s->sh_size))
        return -1;
    const char *name = (const char *)im->p + s->sh_offset;
    /* The executable is opened as /proc/self/exe (it may be deleted or in another mount namespace);
     * its debug link is looked for beside the file that link names. */
    ssize_t n = strncmp(path, "/proc/", 6) == 0 ? readlink(path, real, sizeof real - 1) : -1;
    if (n > 0) {
        real[n] = 0;
        path = real;
    }
    const char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) + 1 >= sizeof dir || strchr(name, '/'))
        return -1;
    memcpy(dir, path, (size_t)(slash - path) + 1);
    dir[slash - path + 1] = 0;
    if ((join(p, sizeof p, dir, name, NULL, NULL) && strcmp(p, path) && map_file(p, out) == 0) ||
        (join(p, sizeof p, dir, ".debug/", name, NULL) && map_file(p, out) == 0) ||
        (join(p, sizeof p, DEBUG_ROOT, dir, name, NULL) && map_file(p, out) == 0))
        return 0;
    return -1;
}

int ml_elf_symbols(const char *path, ml_sym_fn fn, void *arg)
{
    struct image im;
    if (map_file(path, &im) != 0 || !ehdr(&im)) {
        unmap(&im);
        return ML_SYMS_UNREADABLE;
    }
    int got = 0;
    if (symbols(&im, SHT_SYMTAB, fn, arg))
        got |= ML_SYMS_SYMTAB;
    if (symbols(&im, SHT_DYNSYM, fn, arg))
        got |= ML_SYMS_DYNSYM;
    if (!(got & ML_SYMS_SYMTAB)) {
        const Elf64_Shdr *s = section(&im, ".gnu_debugdata");
        if (s && inside(&im, s->sh_offset, s->sh_size)) {
            size_t n;
            struct image mini = {ml_xz_decode(im.p + s->sh_offset, s->sh_size, &n), 0};
            mini.n = n;
            if (mini.p && ehdr(&mini) && symbols(&mini, SHT_SYMTAB, fn, arg))
                got |= ML_SYMS_MINIDEBUG;
            else if (!mini.p && n == 0)
                got |= ML_SYMS_MINIDEBUG_UNREAD;
            if (mini.p)
                unmap(&mini);
        }
        struct image dbg;
        if (open_debug_file(&im, path, &dbg) == 0) {
            if (ehdr(&dbg) && symbols(&dbg, SHT_SYMTAB, fn, arg))
                got |= ML_SYMS_DEBUGFILE;
            unmap(&dbg);
        }
    }
    unmap(&im);
    return got;
}

int ml_elf_contains(const char *path, const char *const *needles)
{
    struct image im;
    if (map_file(path, &im) != 0)
        return -1;
    /* The strings are constants: .rodata when the file says where it is (a fifth of a large
     * library: this runs for every stripped library loaded, dlopen included), else all of it. */
    const Elf64_Shdr *ro = section(&im, ".rodata");
    const uint8_t *p = im.p;
    size_t n = im.n;
    if (ro && ro->sh_type == SHT_PROGBITS && inside(&im, ro->sh_offset, ro->sh_size)) {
        p = im.p + ro->sh_offset;
        n = ro->sh_size;
    }
    int found = -1;
    for (int i = 0; needles[i] && found < 0; i++)
        if (memmem(p, n, needles[i], strlen(needles[i])))
            found = i;
    unmap(&im);
    return found;
}
