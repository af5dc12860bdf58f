/* `memlens attach`: the runtime loaded into a process that was started without it.
 *
 * memlens (crates/memlens-attach) stops one thread of the process for a moment and makes it start a
 * loader thread, which dlopen()s the runtime from a memfd (the library constructor runs as usual:
 * configuration, unwinders, control socket) and calls memlens_attach_entry(). That entry:
 *   1. switches sampling off and takes the configuration memlens passed;
 *   2. forwards to the definitions the program was bound to (dlsym(RTLD_DEFAULT), not RTLD_NEXT: a
 *      dlopen'ed library's "next" is its own dependencies, which would skip a jemalloc the program
 *      was linked with);
 *   3. patches every module's free-side slots, then its allocation slots (got.c), so no block we hand
 *      out can reach the real free;
 *   4. has the runtime's thread (ctl.c) patch modules dlopen'ed later (free side first, again), and
 *      plans the jump that has them scanned for linked-in allocators as they load (loadwatch.c);
 *   5. switches sampling on if asked.
 * `memlens detach` (the control socket's `detach`) stops sampling and puts the allocation slots
 * back; the free side stays for the life of the process, since sampled blocks may still be live.
 * A later `memlens attach` finds the control socket and re-hooks through it (`attach`). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/fmt.h"
#include "../base/log.h"
#include "../base/proc.h"
#include "../record/timeline.h"
#include "../intercept/boot.h"
#include "../intercept/family.h"
#include "../intercept/finder.h"
#include "../intercept/got.h"
#include "../unwind/unwind.h"
#include "attach.h"
#include "control.h"
#include "ctl.h"

#define WATCH_MS 20 /* how often the watcher looks for new modules */

static _Atomic int attached;    /* the runtime came in through memlens_attach_entry */
static _Atomic int hooked;      /* allocation slots point at us */
static _Atomic int patching;    /* one pass over the modules at a time */
static _Atomic int watcher_gone; /* main() exited: no more attaching */
static unsigned long long seen_adds;

/* ---- the arguments of the attach request ---- */

/* Value of `key=` in a space-separated list, copied into val; 0 if absent. */
static int arg_of(const char *args, const char *key, char *val, size_t cap)
{
    size_t k = strlen(key);
    for (const char *p = args; p && *p;) {
        while (*p == ' ')
            p++;
        if (!strncmp(p, key, k) && p[k] == '=') {
            size_t n = 0;
            for (p += k + 1; *p && *p != ' ' && n + 1 < cap; p++)
                val[n++] = *p;
            val[n] = 0;
            return 1;
        }
        p = strchr(p, ' ');
    }
    return 0;
}

static int parse_unwinder(const char *s)
{
    if (!strcmp(s, "fp"))
        return ML_UNW_FP;
    if (!strcmp(s, "libgcc"))
        return ML_UNW_LIBGCC;
    if (!strcmp(s, "libunwind"))
        return ML_UNW_LIBUNWIND;
    if (!strcmp(s, "dwarf"))
        return ML_UNW_DWARF;
    return -1;
}

/* Apply `interval=`, `unwinder=` and `active=` from args. Returns NULL or the error. */
static const char *configure(const char *args, int *want_active)
{
    char v[64];
    if (arg_of(args, "unwinder", v, sizeof v)) {
        int u = parse_unwinder(v);
        if (u < 0)
            return "unwinder must be dwarf, fp, libgcc or libunwind";
        const char *why;
        if (u == ML_UNW_LIBUNWIND && ml_unwind_load_libunwind(&why) != 0)
            return "libunwind.so.8 cannot be used in the process (install libunwind8; never under a "
                   "seccomp filter)";
        if (u == ML_UNW_DWARF && ml_cfg.unwinder != ML_UNW_DWARF)
            return "the dwarf unwinder could not be set up in this process";
        ml_cfg.unwinder = u;
    }
    if (arg_of(args, "interval", v, sizeof v)) {
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        if (*end || end == v)
            return "interval must be a number of bytes";
        ml_set_interval(n);
    }
    *want_active = arg_of(args, "active", v, sizeof v) && v[0] == '1';
    return NULL;
}

/* ---- patching ---- */

static int lock_patching(void)
{
    int z = 0;
    return atomic_compare_exchange_strong(&patching, &z, 1);
}

/* Free side everywhere, then (if hooked) allocation side. -1 if a free-side pass failed: then the
 * allocation side must not go in, or a module we could not patch might free a sampled block. */
static int patch_all(int alloc)
{
    int e = ml_got_apply(ML_GOT_FREE) < 0 || (alloc && ml_got_apply(ML_GOT_ALLOC) < 0) ? -1 : 0;
    if (ml_got_retry())
        seen_adds = 0; /* a module was left out (loaded or unloaded meanwhile): the watcher's next
                        * tick passes again */
    return e;
}

/* main() called pthread_exit: the process must be able to end once the program's threads do. */
static int main_gone(void)
{
    char st = ml_proc_main_state();
    return st == 'Z' || st == 'X';
}

/* Stop sampling and put the allocation slots back. Returns the number of slots restored. */
static int unhook(void)
{
    ml_set_active(0);
    while (!lock_patching())
        sched_yield();
    int n = ml_got_apply(ML_GOT_UNHOOK);
    ml_hooks_counting(0); /* entry hooks on linked-in allocators: their stubs lead to the originals */
    atomic_store(&hooked, 0);
    atomic_store(&patching, 0);
    return n;
}

/* New modules (dlopen) get the same treatment. The runtime's thread (ctl.c) calls this every
 * WATCH_MS to poll dl_iterate_phdr's add counter: hooking dlopen instead would make glibc resolve the
 * caller's RUNPATH/$ORIGIN against our module. (One thread of ours, not a watcher of its own: set*id
 * and unshare end the runtime's thread around them, setxid.c and ns.c, and a second thread would
 * need the same.) */
static _Atomic int watching;
static int64_t next_watch_ms;
static unsigned ticks;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void watch(void)
{
    unsigned long long adds = ml_got_adds();
    if (adds == seen_adds || !lock_patching())
        return;
    seen_adds = adds;
    if (patch_all(atomic_load(&hooked)) != 0) {
        ml_got_apply(ML_GOT_UNHOOK);
        atomic_store(&hooked, 0);
        const char *module;
        uintptr_t page;
        int err;
        ml_got_failure(&module, &page, &err);
        errno = err;
        ml_fail("attach: cannot patch %s, loaded after attach: its RELRO page %p stays "
                "read-only: mprotect: %m", module, (void *)page);
    }
    atomic_store(&patching, 0);
}

int64_t ml_attach_tick(void)
{
    if (!atomic_load_explicit(&watching, memory_order_relaxed) || atomic_load(&watcher_gone))
        return -1;
    int64_t now = mono_ms();
    if (now < next_watch_ms)
        return next_watch_ms - now;
    next_watch_ms = now + WATCH_MS;
    if (++ticks % 50 == 0 && main_gone()) {
        /* main() called pthread_exit: modules loaded from now on would not be patched (the
         * process is ending), so stop sampling first. */
        atomic_store(&watcher_gone, 1);
        unhook();
        return -1;
    }
    watch();
    return WATCH_MS;
}

static int start_watcher(void)
{
    atomic_store(&watching, 1);
    ml_ctl_need_thread();
    return ml_ctl_thread_running() ? 0 : -1;
}

/* Called by the loader thread right after dlopen. `args`: `fd=N interval=N active=0|1
 * [unwinder=NAME]`. Returns 0, or 1 with the reason in msg (the process is left as it was, apart
 * from free-side hooks, which forward everything while nothing is sampled). */
ML_EXPORT int memlens_attach_entry(const char *args, char *msg, size_t cap)
{
    char v[32];
    struct ml_buf m = {msg, 0, cap};
    msg[0] = 0;
    if (arg_of(args, "fd", v, sizeof v))
        close(atoi(v));
    if (atomic_exchange(&attached, 1)) {
        ml_buf_str(&m, "the runtime is already attached");
        return 1;
    }
    ml_init();
    ml_tls.busy++;
    atomic_store(&ml_cfg.active, 0);
    int want_active = 0;
    const char *why = ml_got_resolve();
    if (!why)
        why = configure(args, &want_active);
    if (!why) {
        struct ml_family r = ml_next;
        for (int i = 0; i < ml_nhooks; i++) {
            struct ml_hook *h = &ml_hooks[i];
            void *p = h->real;
            if (!strcmp(h->name, "malloc")) r.malloc = p;
            else if (!strcmp(h->name, "free")) r.free = p;
            else if (!strcmp(h->name, "calloc")) r.calloc = p;
            else if (!strcmp(h->name, "realloc")) r.realloc = p;
            else if (!strcmp(h->name, "posix_memalign")) r.posix_memalign = p;
            else if (!strcmp(h->name, "aligned_alloc")) r.aligned_alloc = p;
            else if (!strcmp(h->name, "memalign")) r.memalign = p;
            else if (!strcmp(h->name, "malloc_usable_size")) r.malloc_usable_size = p;
        }
        ml_next = r;
        ml_timeline_allocator(r.malloc);
        lock_patching();
        seen_adds = ml_got_adds();
        if (patch_all(1) != 0) {
            ml_got_apply(ML_GOT_UNHOOK);
            why = "cannot make a RELRO page writable to patch it";
        } else {
            atomic_store(&hooked, 1);
        }
        atomic_store(&patching, 0);
    }
    /* Allocators linked into the program, and the jump that has libraries loaded later scanned
     * (loadwatch.c): planned here, written by memlens with every thread stopped
     * (crates/memlens-attach/src/hooks.rs reads memlens_pending and memlens_loadwatch). */
    if (!why) {
        ml_hooks_scan(ML_HOOK_DEFER, NULL, 0);
        ml_loader_watch_plan();
    }
    if (!why && start_watcher() != 0) {
        ml_got_apply(ML_GOT_UNHOOK);
        atomic_store(&hooked, 0);
        why = "cannot start the runtime's thread (it watches for modules loaded later)";
    }
    ml_tls.busy--;
    if (why) {
        ml_buf_str(&m, why);
        return 1;
    }
    if (want_active)
        ml_set_active(1);
    return 0;
}

/* ---- the control socket's `attach` and `detach` (called from ctl.c) ---- */

static void do_attach(const char *arg, struct ml_buf *out)
{
    int want_active = 0;
    const char *why = configure(arg, &want_active);
    if (why) {
        ml_buf_str(out, "error attach: ");
        ml_buf_str(out, why);
        return;
    }
    int was = atomic_load(&hooked);
    if (atomic_load(&watcher_gone)) {
        ml_buf_str(out, "error attach: main() has exited (pthread_exit); modules loaded from now on "
                        "could not be patched");
        return;
    }
    if (!was) {
        while (!lock_patching())
            sched_yield();
        int e = patch_all(1);
        atomic_store(&patching, 0);
        if (e != 0) {
            ml_got_apply(ML_GOT_UNHOOK);
            ml_buf_str(out, "error attach: cannot make a RELRO page writable to patch it");
            return;
        }
        atomic_store(&hooked, 1);
        ml_hooks_counting(1);
        /* Modules loaded while detached (the loader's jump was put back): planned for memlens to
         * hook with every thread stopped, with the jump again, right after this reply. */
        ml_tls.busy++;
        ml_hooks_scan(ML_HOOK_DEFER, NULL, 0);
        ml_loader_watch_plan();
        ml_tls.busy--;
    }
    if (want_active)
        ml_set_active(1);
    ml_buf_str(out, "ok attached=1 was=");
    ml_buf_u64(out, (uint64_t)was);
    ml_buf_str(out, " active=");
    ml_buf_u64(out, (uint64_t)(atomic_load(&ml_cfg.active) != 0));
}

static void do_detach(struct ml_buf *out)
{
    int n = unhook();
    ml_buf_str(out, "ok detached unhooked=");
    ml_buf_u64(out, (uint64_t)(n > 0 ? n : 0));
}

/* Returns 1 if `cmd` was ours (the reply is in out), 0 otherwise. */
int ml_attach_ctl(const char *cmd, const char *arg, char *out, size_t cap)
{
    int is_attach = !strcmp(cmd, "attach"), is_detach = !strcmp(cmd, "detach");
    if (!is_attach && !is_detach)
        return 0;
    struct ml_buf b = {out, 0, cap};
    out[0] = 0;
    if (!atomic_load(&attached))
        ml_buf_str(&b, "error this process was started under memlens (memlens run): it needs no attach; "
                       "use memlens ctl start|stop");
    else if (is_attach)
        do_attach(arg, &b);
    else
        do_detach(&b);
    return 1;
}
