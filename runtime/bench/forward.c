/* The floor of LD_PRELOAD interposition: a library whose malloc and free only forward to the next
 * definition. fastpath.sh measures it beside libmemlens, so the runtime's own cost (countdown, range
 * compare) can be told apart from the cost of any interposer (one more indirect jump per call). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);

__attribute__((constructor)) static void resolve(void)
{
    next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
}

void *malloc(size_t n)
{
    if (__builtin_expect(!next_malloc, 0))
        resolve(); /* dlsym does not allocate on glibc 2.36, so this cannot recurse */
    return next_malloc(n);
}

void free(void *p)
{
    if (__builtin_expect(!next_free, 0))
        resolve();
    next_free(p);
}
