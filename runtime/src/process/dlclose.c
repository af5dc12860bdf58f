/* dlclose: a library may leave the process. Its module is remembered first (modules.c: samples
 * taken in it stay symbolizable), and the dwarf unwinder's rules and cached stacks are dropped after
 * (new code may be mapped at those addresses). `memlens attach` patches the GOT slots of dlclose to
 * here as well (got.c), for the same reasons. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "../store/modules.h"
#include "../unwind/dwarf.h"

static int (*real_dlclose)(void *);

ML_EXPORT int dlclose(void *handle)
{
    if (!real_dlclose)
        real_dlclose = (int (*)(void *))dlsym(RTLD_NEXT, "dlclose");
    ml_modules_unloading(handle);
    int r = real_dlclose(handle);
    ml_dwarf_code_unloaded();
    return r;
}
