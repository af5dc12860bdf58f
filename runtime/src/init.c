/* Start-up: configuration from the environment, resolving the next allocator, and the library
 * constructor/destructor. Two phases, because the first malloc may arrive before our constructor runs:
 *   ml_init()      - callable from inside malloc: address range, real functions, stack table, config.
 *   constructor    - dlopen(libunwind), pthread_atfork, control thread: things that must not run
 *                    inside an arbitrary malloc call (they take loader locks or allocate). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "boot.h"
#include "config.h"
#include "ctl.h"
#include "fork.h"
#include "log.h"
#include "modules.h"
#include "out.h"
#include "range.h"
#include "stacks.h"
#include "state.h"
#include "unwind.h"

__thread struct ml_thread ml_tls;
struct ml_config ml_cfg = {.interval = 524288, .active = 1, .max_depth = 64, .unwinder = -1};


/* Boot versions of the real functions: they run ml_init and then forward. While this thread is inside
 * ml_init (dlsym may calloc), they serve memory from the boot arena. */
static void *boot_malloc(size_t n)
{
    ml_init();
    return ml_tls.in_init ? ml_boot_alloc(n) : ml_real.malloc(n);
}
static void boot_free(void *p)
{
    ml_init();
    if (!ml_tls.in_init && !ml_in_range(p))
        ml_real.free(p);
}
static void *boot_calloc(size_t a, size_t b)
{
    ml_init();
    if (ml_tls.in_init)
        return b && a > (size_t)-1 / b ? NULL : ml_boot_alloc(a * b); /* boot memory is zeroed */
    return ml_real.calloc(a, b);
}
static void *boot_realloc(void *p, size_t n)
{
    ml_init();
    if (ml_tls.in_init)
        return p ? NULL : ml_boot_alloc(n); /* nothing in dlsym reallocs; refuse rather than guess */
    return ml_real.realloc(p, n);
}
static int boot_posix_memalign(void **r, size_t a, size_t n)
{
    ml_init();
    if (ml_tls.in_init)
        return 12; /* ENOMEM */
    return ml_real.posix_memalign(r, a, n);
}
static void *boot_aligned_alloc(size_t a, size_t n)
{
    ml_init();
    return ml_tls.in_init ? NULL : ml_real.aligned_alloc(a, n);
}
static void *boot_memalign(size_t a, size_t n)
{
    ml_init();
    return ml_tls.in_init ? NULL : ml_real.memalign(a, n);
}
static size_t boot_usable(void *p)
{
    ml_init();
    return ml_tls.in_init ? 0 : ml_real.malloc_usable_size(p);
}

struct ml_real ml_real = {boot_malloc,   boot_free,          boot_calloc,   boot_realloc,
                          boot_posix_memalign, boot_aligned_alloc, boot_memalign, boot_usable};

static _Atomic int init_state; /* 0 not started, 1 running, 2 done */

void ml_fail(const char *why)
{
    atomic_store(&ml_cfg.active, 0);
    if (!atomic_exchange(&ml_cfg.failed, 1)) {
        ml_log(why);
        ml_log("profiling stopped; the program continues");
    }
}

const char *ml_unwinder_name(int u)
{
    return u == ML_UNW_FP ? "fp" : u == ML_UNW_LIBGCC ? "libgcc" : u == ML_UNW_DWARF ? "dwarf" : "libunwind";
}

/* Sizes like 524288, 512K, 512KiB, 2M, at most 2^40 (an interval the Exp(R) countdown, a signed
 * 64-bit counter, has room for; the CLI's limit too). Returns -1 on garbage or a size too large. */
static int64_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || v > (1ull << 40))
        return -1;
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    return *end || (v << shift) > (1ull << 40) ? -1 : (int64_t)(v << shift);
}

static char out_buf[4000];
char ml_ctl_dir_env[4000];
char ml_run_dir_env[4000];

/* Copy environment variable `name` into buf; returns buf, or NULL when it is unset, empty or does
 * not fit (a truncated path would be another path). */
static const char *ml_env_copy(const char *name, char *buf, size_t cap)
{
    const char *s = getenv(name);
    size_t n = s ? strlen(s) : 0;
    buf[0] = 0;
    if (!n)
        return NULL;
    if (n >= cap) {
        struct ml_out o = {.fd = 2};
        ml_out_str(&o, "memlens: ");
        ml_out_str(&o, name);
        ml_out_str(&o, " is too long; ignored\n");
        ml_out_flush(&o);
        return NULL;
    }
    memcpy(buf, s, n + 1);
    return buf;
}

static void read_config(void)
{
    const char *s = getenv("MEMLENS_INTERVAL");
    if (s && *s) {
        int64_t v = parse_size(s);
        if (v < 0)
            ml_log("MEMLENS_INTERVAL is not a size of at most 1 TiB; using 524288");
        else
            ml_cfg.interval = (uint64_t)v;
    }
    s = getenv("MEMLENS_ACTIVE");
    if (s && *s)
        ml_cfg.active = *s != '0';
    s = getenv("MEMLENS_MAX_DEPTH");
    if (s && *s) {
        int64_t v = parse_size(s);
        ml_cfg.max_depth = v < 1 ? 64 : v > ML_MAX_DEPTH ? ML_MAX_DEPTH : (int)v;
    }
    s = getenv("MEMLENS_UNWINDER");
    if (s && *s) {
        if (s[0] == 'f' && s[1] == 'p' && !s[2])
            ml_cfg.unwinder = ML_UNW_FP;
        else if (!__builtin_strcmp(s, "libgcc"))
            ml_cfg.unwinder = ML_UNW_LIBGCC;
        else if (!__builtin_strcmp(s, "libunwind"))
            ml_cfg.unwinder = ML_UNW_LIBUNWIND;
        else if (!__builtin_strcmp(s, "dwarf"))
            ml_cfg.unwinder = ML_UNW_DWARF;
        else
            ml_log("MEMLENS_UNWINDER must be dwarf, fp, libgcc or libunwind; using the default");
    }
    /* Copied, not pointed at: programs that set their process title (redis, nginx, PostgreSQL)
     * overwrite the environment strings in place. */
    ml_cfg.out = ml_env_copy("MEMLENS_OUT", out_buf, sizeof out_buf);
    ml_env_copy("MEMLENS_CTL_DIR", ml_ctl_dir_env, sizeof ml_ctl_dir_env);
    /* where the state file goes (state.c); `memlens run` makes it */
    ml_env_copy("MEMLENS_RUN_DIR", ml_run_dir_env, sizeof ml_run_dir_env);
}

static void *next_sym(const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p)
        ml_fail("cannot find the next allocator (dlsym RTLD_NEXT failed)");
    return p;
}

static void resolve_real(void)
{
    struct ml_real r;
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
        ml_log("fatal: the malloc family cannot be resolved");
        _exit(127);
    }
    ml_real = r;
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
    read_config();
    if (ml_range_init() != 0)
        ml_fail("cannot reserve the address range for sampled blocks");
    resolve_real();
    if (ml_stacks_init() != 0)
        ml_fail("cannot map the stack table");
    ml_cfg.pid = getpid();
    ml_cfg.start_ns = ml_now_ns();
    ml_tls.in_init = 0;
    atomic_store_explicit(&init_state, 2, memory_order_release);
}

__attribute__((constructor(101))) static void ml_constructor(void)
{
    ml_init();
    ml_tls.busy++;
    ml_unwind_setup();
    atomic_store(&ml_st->unwinder, (uint32_t)ml_cfg.unwinder); /* as setup settled it */
    ml_fork_setup();
    ml_state_modules_init();
    ml_tls.busy--;
    ml_cfg.ready = 1;
    if (ml_ctl_start)
        ml_ctl_start();
}
