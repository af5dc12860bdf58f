/* Libraries loaded after start (dlopen): scanned for linked-in allocators, and hooked, before their
 * code runs (finder.h).
 *
 * Why not interpose dlopen: glibc resolves a bare name and $ORIGIN against the caller's RUNPATH, and
 * the caller would be us. Why not poll from the runtime's thread: the library's code may already run
 * on another thread while its entry bytes are rewritten. The loader instead calls _dl_debug_state
 * (r_debug.r_brk, where debuggers put their breakpoint) once the new objects are mapped and listed
 * (r_state RT_CONSISTENT), before it relocates them and runs their constructors; nothing of the new
 * library has run yet, and the loader's lock keeps other dlopens out. Its body is one `ret` padded
 * to the next 16 bytes: a 5-byte jump into ml_loader_event fits in the ret and the padding, which is
 * never executed. Where it does not fit (another loader, a build without padding), libraries loaded
 * later are not scanned, and memlens says so once at start.
 *
 * Under `memlens attach` the program's threads run while the runtime comes in, and one of them may
 * be inside _dl_debug_state: the jump is only planned here (memlens_loadwatch) and memlens writes it
 * with every thread stopped, as it writes the allocators' hooks, and puts the original bytes back
 * at detach (crates/memlens-attach/src/hooks.rs). A library loaded between the plan and the write
 * may already run, and would be taken for a new one by the next dlopen's scan: the loader's count
 * of objects ever added (dlpi_adds) is kept at the plan and compared at the first notification
 * that follows (RT_ADD: the first new object not listed yet, or, since glibc 2.35, listed as the
 * last). If more were added, that dlopen's scan only plans (ML_HOOK_DEFER, for the next memlens
 * attach): no jump is written here over code that may run. */
#define _GNU_SOURCE
#include <link.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

#include "../base/fmt.h"
#include "../base/log.h"
#include "../base/notes.h"
#include "../base/rt.h"
#include "finder.h"
#include "got.h"
#include "patch.h"

/* Set while this thread scans: a dlopen of ours (liblzma, xz.c) then reaches the loader event
 * again, and must neither scan nor wait for the scan lock it holds. */
static __thread __attribute__((tls_model("initial-exec"))) int in_scan;

int ml_loader_context;

/* Length of one of the multi-byte NOPs GNU as pads functions with (0x90, or 0f 1f /0 with an
 * optional SIB and displacement, after 66/2e prefixes), or 0. Only padding is recognised: any
 * instruction is a reason not to write. */
static int nop_len(const uint8_t *c, int avail)
{
    int i = 0;
    while (i < avail && (c[i] == 0x66 || c[i] == 0x2e))
        i++;
    if (i < avail && c[i] == 0x90)
        return i + 1;
    if (i + 2 >= avail || c[i] != 0x0f || c[i + 1] != 0x1f)
        return 0;
    static const uint8_t modrm[] = {0x00, 0x40, 0x44, 0x80, 0x84}, extra[] = {0, 1, 2, 4, 5};
    for (unsigned k = 0; k < sizeof modrm; k++)
        if (c[i + 2] == modrm[k])
            return i + 3 + extra[k] <= avail ? i + 3 + extra[k] : 0;
    return 0;
}

/* Where in _dl_debug_state the jump goes (its `ret`, after an endbr64), or 0 if 5 bytes from there
 * are not all ret-and-padding up to a 16-byte boundary. */
static uintptr_t jump_site(uintptr_t brk)
{
    const uint8_t *c = (const uint8_t *)brk;
    uintptr_t at = brk;
    if (c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa)
        at += 4;
    if (*(const uint8_t *)at != 0xc3)
        return 0;
    uintptr_t end = (at + 16) & ~(uintptr_t)15; /* the next function starts at most here */
    if (end < at + 5)
        return 0;
    for (uintptr_t p = at + 1; p < end;) {
        int n = nop_len((const uint8_t *)p, (int)(end - p));
        if (!n)
            return 0;
        p += (uintptr_t)n;
    }
    return at;
}

static unsigned long long planned_adds; /* dlpi_adds when memlens attach had the jump planned */
static int check_adds, defer_once;

/* Objects the loader lists at RT_ADD that its dlopen is adding (glibc 2.35 moved the notification
 * after the first new object is listed: BZ #28062). */
static unsigned long long listed_at_add(void)
{
#ifdef __GLIBC__
    const char *v = gnu_get_libc_version();
    int minor = v[0] == '2' && v[1] == '.' ? atoi(v + 2) : 99;
    return v[0] > '2' || minor >= 35;
#else
    return 0; /* memlens attaches to glibc programs only */
#endif
}

/* Only where that dlopen brought an allocator: a program that dlopens in a loop has one racing
 * nearly every attach, mostly of libraries with nothing to hook. Once. */
static void say_deferred(void)
{
    static int said;
    if (said++)
        return;
    ml_note(1, "memlens: a library was loaded while memlens attached: the libraries of the dlopen that "
               "followed are not hooked (their allocators' allocations are not sampled) until the next "
               "memlens attach");
}

/* What the loader's jump leads to: a plain C function of no arguments, called as _dl_debug_state
 * is, and returning to the loader as its `ret` would have. */
static void ml_loader_event(void)
{
    int st = _r_debug.r_state;
    if (in_scan || !ml_cfg.ready)
        return;
    if (st == RT_ADD && check_adds) { /* the first dlopen since the jump was written */
        check_adds = 0;
        defer_once = ml_got_adds() - planned_adds > listed_at_add();
    }
    if (st != RT_CONSISTENT)
        return;
    in_scan = 1;
    ml_tls.busy++;
    ml_loader_context = 1;
    int defer = defer_once;
    defer_once = 0;
    if (ml_hooks_scan(defer ? ML_HOOK_DEFER : ML_HOOK_NOW, NULL, 0) > 0 && defer)
        say_deferred();
    ml_loader_context = 0;
    ml_tls.busy--;
    in_scan = 0;
}

static void say_blind(const char *why)
{
    char line[256];
    struct ml_buf b = {line, 0, sizeof line};
    ml_buf_str(&b, "memlens: libraries loaded later (dlopen) are not scanned for allocators linked into "
                   "them: ");
    ml_buf_str(&b, why);
    ml_note(1, line);
}

/* The jump at _dl_debug_state, into p; NULL, or why not. */
static const char *plan(struct ml_patch *p)
{
    uintptr_t brk = _r_debug.r_brk;
    uintptr_t at = brk ? jump_site(brk) : 0;
    if (!at)
        return "the loader's notification (_dl_debug_state) is not one this runtime can hook";
    intptr_t rel = (intptr_t)((uintptr_t)&ml_loader_event - (at + 5));
    if (rel != (int32_t)rel)
        return "the loader is more than 2 GiB away from the runtime";
    memset(p, 0, sizeof *p);
    p->entry = p->site = at;
    p->len = 5;
    memcpy(p->old, (const void *)at, 5);
    p->code[0] = 0xe9;
    int32_t r32 = (int32_t)rel;
    memcpy(&p->code[1], &r32, 4);
    return NULL;
}

void ml_loader_watch(void)
{
    static int done;
    if (done++)
        return;
    struct ml_patch p;
    const char *why = plan(&p);
    if (!why && ml_patch_write(&p) != 0)
        why = "the loader's code cannot be written";
    if (why)
        say_blind(why);
}

/* The table memlens attach reads: the jump to write with every thread stopped (site 0: none, and
 * why). Its layout is read by crates/memlens-attach/src/hooks.rs: change both together. */
#define LOADWATCH_MAGIC 0x6d6c6c6477617431ull /* "mlldwat1" */
struct ml_loadwatch {
    uint64_t magic;
    uint64_t site;
    uint8_t len;
    uint8_t code[ML_PATCH_MAX];
    uint8_t old[ML_PATCH_MAX];
    uint8_t pad[7];
    char why[256];
};
ML_EXPORT struct ml_loadwatch memlens_loadwatch = {LOADWATCH_MAGIC, 0, 0, {0}, {0}, {0}, {0}};
_Static_assert(offsetof(struct ml_loadwatch, code) == 17 && offsetof(struct ml_loadwatch, why) == 56,
               "hooks.rs reads this layout");

void ml_loader_watch_plan(void)
{
    planned_adds = ml_got_adds();
    check_adds = 1;
    static int done;
    if (done++)
        return;
    struct ml_patch p;
    const char *why = plan(&p);
    if (why) {
        say_blind(why);
        struct ml_buf b = {memlens_loadwatch.why, 0, sizeof memlens_loadwatch.why};
        ml_buf_str(&b, why);
        return;
    }
    memlens_loadwatch.len = p.len;
    memcpy(memlens_loadwatch.code, p.code, sizeof p.code);
    memcpy(memlens_loadwatch.old, p.old, sizeof p.old);
    __atomic_store_n(&memlens_loadwatch.site, p.site, __ATOMIC_RELEASE);
}
