/* Start-up that may run inside the first malloc: ml_init resolves the allocator we forward to
 * (dlsym(RTLD_NEXT)), reads the configuration, reserves the range and maps the stack table.
 *
 * The first malloc may arrive before our constructor runs (another library's constructor, the
 * loader), so ml_next (family.h) starts out pointing at the boot versions below: they run ml_init and then
 * forward. While this thread is inside ml_init (dlsym may calloc), they serve memory from the boot
 * arena instead. What must not run inside an arbitrary malloc call (dlopen, pthread_atfork, the
 * control thread) waits for the constructor (init.c), the floor above. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/log.h"
#include "../record/timeline.h"
#include "../record/range.h"
#include "../store/stacks.h"
#include "boot.h"
#include "family.h"

/* Boot versions of the real functions: they run ml_init and then forward. While this thread is inside
 * ml_init (dlsym may calloc), they serve memory from the boot arena. */
static void *boot_malloc(size_t n)
{
    ml_init();
    return ml_tls.in_init ? ml_boot_alloc(n) : ml_next.malloc(n);
}
static void boot_free(void *p)
{
    ml_init();
    if (!ml_tls.in_init && !ml_in_range(p))
        ml_next.free(p);
}
static void *boot_calloc(size_t a, size_t b)
{
    ml_init();
    if (ml_tls.in_init)
        return b && a > (size_t)-1 / b ? NULL : ml_boot_alloc(a * b); /* boot memory is zeroed */
    return ml_next.calloc(a, b);
}
static void *boot_realloc(void *p, size_t n)
{
    ml_init();
    if (ml_tls.in_init)
        return p ? NULL : ml_boot_alloc(n); /* nothing in dlsym reallocs; refuse rather than guess */
    return ml_next.realloc(p, n);
}
static int boot_posix_memalign(void **r, size_t a, size_t n)
{
    ml_init();
    if (ml_tls.in_init)
        return 12; /* ENOMEM */
    return ml_next.posix_memalign(r, a, n);
}
static void *boot_aligned_alloc(size_t a, size_t n)
{
    ml_init();
    return ml_tls.in_init ? NULL : ml_next.aligned_alloc(a, n);
}
static void *boot_memalign(size_t a, size_t n)
{
    ml_init();
    return ml_tls.in_init ? NULL : ml_next.memalign(a, n);
}
static size_t boot_usable(void *p)
{
    ml_init();
    return ml_tls.in_init ? 0 : ml_next.malloc_usable_size(p);
}

struct ml_family ml_next = {boot_malloc,        boot_free,          boot_calloc,   boot_realloc,
                            boot_posix_memalign, boot_aligned_alloc, boot_memalign, boot_usable,
                            ML_SRC_INTERPOSED};

static _Atomic int init_state; /* 0 not started, 1 running, 2 done */

static void *next_sym(const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p)
        ml_log("cannot find the next allocator's %s: dlsym(RTLD_NEXT) found no definition after "
               "libmemlens.so", name);
    return p;
}

static void resolve_real(void)
{
    struct ml_family r = {.kind = ML_SRC_INTERPOSED};
    r.malloc = (void *(*)(size_t))next_sym("malloc");
    r.free = (void (*)(void *))next_sym("free");
    r.calloc = (void *(*)(size_t, size_t))next_sym("calloc");
    r.realloc = (void *(*)(void *, size_t))next_sym("realloc");
    r.posix_memalign = (int (*)(void **, size_t, size_t))next_sym("posix_memalign");
    r.aligned_alloc = (void *(*)(size_t, size_t))next_sym("aligned_alloc");
    r.memalign = (void *(*)(size_t, size_t))next_sym("memalign");
    r.malloc_usable_size = (size_t(*)(void *))next_sym("malloc_usable_size");
    if (!r.malloc || !r.free || !r.calloc || !r.realloc || !r.posix_memalign || !r.aligned_alloc ||
        !r.memalign || !r.malloc_usable_size) {
        /* Nothing sane to forward to: this is fatal for the host, but there is no alternative. */
        ml_log("fatal: the malloc family cannot be resolved; exiting with status 127");
        /* exit_group, not _exit: exit.c's _exit would try a dump; with nothing initialised it
         * would find nothing to do, but a floor this low should not reach up for it. */
        syscall(SYS_exit_group, 127);
    }
    ml_next = r;
    ml_timeline_allocator(r.malloc);
}

void ml_init(void)
{
    if (likely(atomic_load_explicit(&init_state, memory_order_acquire) == 2))
        return;
    int expect = 0;
    if (!atomic_compare_exchange_strong(&init_state, &expect, 1)) {
        if (ml_tls.in_init)
            return; /* recursion from dlsym: the caller serves from the boot arena */
        while (atomic_load_explicit(&init_state, memory_order_acquire) != 2)
            sched_yield();
        return;
    }
    ml_tls.in_init = 1;
    ml_config_read();
    /* Each of these says what failed, with its size and errno, and stops profiling (ml_fail):
     * the program goes on, forwarded to its allocator. */
    ml_range_init();
    resolve_real();
    ml_stacks_init();
    ml_cfg.pid = getpid();
    ml_cfg.start_ns = ml_now_ns();
    ml_tls.in_init = 0;
    atomic_store_explicit(&init_state, 2, memory_order_release);
}
