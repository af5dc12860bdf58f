/* The musl build of the runtime (runtime/README.md, "musl"): this header is force-included
 * (`-include`) before every runtime source when build.rs compiles libmemlens.so with musl-gcc, so
 * the runtime's files keep their glibc code and the glibc build is untouched. It maps the few glibc
 * extensions the runtime uses onto musl (compat.c implements them) or onto "absent", which the
 * runtime already handles:
 *
 * - _dl_find_object (FDE and module lookup)  -> one over dl_iterate_phdr (musl takes its lock only between
 *   modules, and its dlopen allocates through libc's internal malloc, never through ours);
 * - dladdr1(RTLD_DL_LINKMAP)                 -> dladdr, then the module list (a musl handle is its
 *   link_map);
 * - __libc_stack_end                         -> getauxval(AT_EXECFN), a string at the very top of
 *   the main thread's stack, above every frame;
 * - _r_debug.r_map                           -> dlopen(NULL), the head of musl's module list;
 * - __libc_single_threaded                   -> 0 (unknown: the threads are counted instead);
 * - strerrordesc_np / strerrorname_np        -> strerror (musl's texts are constant) / no name;
 * - struct mallinfo2                         -> declared only: musl has no mallinfo2, dlsym finds
 *   none and the glibc statistics are not read;
 * - the main program's name in dl_iterate_phdr: musl gives its argv[0]-like path, glibc "" (the
 *   runtime then reads /proc/self/exe): made "" here too.
 * sys/sdt.h and sys/single_threaded.h come from include/ beside this file. */
#ifndef ML_MUSL_COMPAT_H
#define ML_MUSL_COMPAT_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

/* musl's headers make mmap64 a macro for mmap (under _GNU_SOURCE): the runtime defines both. */
#undef mmap64

struct dl_find_object {
    unsigned long long dlfo_flags;
    void *dlfo_map_start;
    void *dlfo_map_end;
    struct link_map *dlfo_link_map;
    void *dlfo_eh_frame;
};
/* Defined (hidden) in compat.c under glibc's own name and layout: the static libgcc unwinder that
 * musl-gcc links in was built against glibc and calls _dl_find_object too. */
int _dl_find_object(void *pc, struct dl_find_object *fo);

#define RTLD_DL_LINKMAP 2
int ml_musl_dladdr1(const void *addr, Dl_info *info, void **extra, int flags);
#define dladdr1 ml_musl_dladdr1

int ml_musl_iterate_phdr(int (*fn)(struct dl_phdr_info *, size_t, void *), void *arg);
#define dl_iterate_phdr ml_musl_iterate_phdr

/* `extern void *__libc_stack_end;` becomes a declaration of this function. */
void **ml_musl_stack_end();
#define __libc_stack_end (*ml_musl_stack_end())

#define __libc_single_threaded 0

/* musl exports no _r_debug: its module list starts at dlopen(NULL). */
struct r_debug *ml_musl_r_debug(void);
#define _r_debug (*ml_musl_r_debug())

#define strerrordesc_np(e) ((const char *)strerror(e))
#define strerrorname_np(e) ((const char *)NULL)

struct mallinfo2 {
    size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};

#endif
