/* The loader's r_debug, found as debuggers find it.
 *
 * A program that names _r_debug itself gets a copy of it in its own data at start (a copy
 * relocation), and from then on every object's _r_debug, the runtime's too, is that copy, which the
 * loader never updates: its state never changes and its notification is the one of the start. The
 * runtime then watched no dlopen (a library loaded later, with jemalloc linked into it, went
 * unhooked and unsampled, silently). The executable's DT_DEBUG entry is what the loader fills with
 * the address of the r_debug it does update; the copy is the fallback where there is none. */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/auxv.h>

#include "rdebug.h"

/* The executable's dynamic section, from its program headers (AT_PHDR: the loader points it at
 * the program's even when it was started as `ld.so PROGRAM`). */
static const ElfW(Dyn) *exe_dynamic(void)
{
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
    size_t n = getauxval(AT_PHNUM);
    uintptr_t bias = 0;
    if (!ph)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (ph[i].p_type == PT_PHDR)
            bias = (uintptr_t)ph - ph[i].p_vaddr;
    for (size_t i = 0; i < n; i++)
        if (ph[i].p_type == PT_DYNAMIC)
            return (const ElfW(Dyn) *)(bias + ph[i].p_vaddr);
    return NULL;
}

struct r_debug *ml_r_debug(void)
{
    static struct r_debug *found;
    if (found)
        return found;
    struct r_debug *r = &_r_debug;
    for (const ElfW(Dyn) *d = exe_dynamic(); d && d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_DEBUG && d->d_un.d_ptr) {
            r = (struct r_debug *)d->d_un.d_ptr;
            break;
        }
    found = r;
    return r;
}
