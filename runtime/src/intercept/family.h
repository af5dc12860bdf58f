/* An allocator family: the entry points an interceptor forwards to when it does not sample, as they
 * were before memlens came (source.h explains the seam they are used through). */
#ifndef MEMLENS_FAMILY_H
#define MEMLENS_FAMILY_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* What kind of source reports an allocation: how it reaches us and whose memory it is. Every event
 * carries it to the seam (source.c), so that a source can be recorded as a sample kind of its own.
 *   ML_SRC_INTERPOSED  the dynamic malloc family and C++ new/delete: our exported functions (run)
 *                      or GOT slots patched to them (attach, got.c); "allocate for me"
 *   ML_SRC_HOOKED      entry hooks on an allocator linked into the binary (issue 35); "allocate
 *                      for me", through its family's originals (trampolines)
 *   ML_SRC_REPORTED    memlens_report_alloc/free (issue 35); "observe"
 *   ML_SRC_MMAP        anonymous mmap/munmap (issue 31); "observe" */
enum ml_src_kind { ML_SRC_INTERPOSED, ML_SRC_HOOKED, ML_SRC_REPORTED, ML_SRC_MMAP };

/* One family's forward table. The fast paths tail-call through it, so a family is a global whose
 * address the compiler knows (rip-relative, no GOT): `jmp *ml_next(%rip)`. */
struct ml_family {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    size_t (*malloc_usable_size)(void *);
    enum ml_src_kind kind;
};

/* The next allocator in the dynamic linker's order: libc's malloc, or one preloaded after us
 * (dlsym(RTLD_NEXT), boot.c); under `memlens attach` what the program's GOT slots held (attach.c).
 * Until ml_init has run it holds boot.c's versions, which run it first. */
extern struct ml_family ml_next;

#pragma GCC visibility pop
#endif
