/* jemalloc's own heap profiler, switched from the control socket: `memlens study` measures it beside
 * memlens in the same process (a service started with MALLOC_CONF=prof:true,prof_active:false).
 *
 *     jemalloc status   -> ok allocator=jemalloc prof=0|1 active=0|1 lg_sample=N   (or allocator=none)
 *     jemalloc start LG -> ok active=1 lg_sample=LG   (prof.reset to 2^LG bytes, then prof.active)
 *     jemalloc stop     -> ok active=0
 *
 * mallctl is looked up with dlsym the first time it is asked for, from the control thread (never
 * from inside malloc). prof.reset and prof.active take jemalloc's own locks; the control thread
 * holds none of ours meanwhile. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

#include "../base/fmt.h"
#include "jeprof.h"

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

static mallctl_fn mallctl_of(void)
{
    static mallctl_fn fn;
    static int looked;
    if (!looked) {
        fn = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
        looked = 1;
    }
    return fn;
}

static int get_bool(mallctl_fn m, const char *name, bool *v)
{
    size_t n = sizeof *v;
    return m(name, v, &n, NULL, 0);
}

/* The `jemalloc …` control request (`arg` is what follows the word); writes the reply line. */
void ml_jemalloc_ctl(const char *arg, char *out, size_t cap)
{
    struct ml_buf r = {out, 0, cap};
    out[0] = 0;
    mallctl_fn m = mallctl_of();
    bool prof = false, active = false;
    if (!m) {
        ml_buf_str(&r, strcmp(arg, "status") == 0 ? "ok allocator=none"
                                                  : "error jemalloc: this process does not run jemalloc");
        return;
    }
    if (get_bool(m, "opt.prof", &prof) != 0 || !prof) {
        ml_buf_str(&r, strcmp(arg, "status") == 0
                           ? "ok allocator=jemalloc prof=0"
                           : "error jemalloc: its profiler is not enabled "
                             "(start the process with MALLOC_CONF=prof:true,prof_active:false)");
        return;
    }
    if (strcmp(arg, "status") == 0) {
        size_t lg = 0, n = sizeof lg;
        get_bool(m, "prof.active", &active);
        m("prof.lg_sample", &lg, &n, NULL, 0);
        ml_buf_str(&r, "ok allocator=jemalloc prof=1");
        ml_buf_kv(&r, "active", active);
        ml_buf_kv(&r, "lg_sample", lg);
        return;
    }
    if (strcmp(arg, "stop") == 0) {
        active = false;
        if (m("prof.active", NULL, NULL, &active, sizeof active) != 0) {
            ml_buf_str(&r, "error jemalloc: prof.active failed");
            return;
        }
        ml_buf_str(&r, "ok active=0");
        return;
    }
    size_t lg = 0;
    const char *d = strncmp(arg, "start ", 6) == 0 ? arg + 6 : NULL;
    for (; d && *d >= '0' && *d <= '9' && lg < 64; d++)
        lg = lg * 10 + (size_t)(*d - '0');
    if (!d || *d || lg == 0 || lg >= 64) {
        ml_buf_str(&r, "error jemalloc: expected status, stop or start LG (LG: log2 of the interval, 1-63)");
        return;
    }
    active = true;
    if (m("prof.reset", NULL, NULL, &lg, sizeof lg) != 0 ||
        m("prof.active", NULL, NULL, &active, sizeof active) != 0) {
        ml_buf_str(&r, "error jemalloc: prof.reset or prof.active failed");
        return;
    }
    ml_buf_str(&r, "ok active=1");
    ml_buf_kv(&r, "lg_sample", lg);
}
