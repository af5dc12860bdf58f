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
 * later are not scanned, and memlens says so once at start. */
#define _GNU_SOURCE
#include <link.h>
#include <string.h>

#include "../base/fmt.h"
#include "../base/log.h"
#include "../base/notes.h"
#include "../base/rt.h"
#include "finder.h"
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

/* What the loader's jump leads to: a plain C function of no arguments, called as _dl_debug_state
 * is, and returning to the loader as its `ret` would have. */
static void ml_loader_event(void)
{
    if (in_scan || !ml_cfg.ready || _r_debug.r_state != RT_CONSISTENT)
        return;
    in_scan = 1;
    ml_tls.busy++;
    ml_loader_context = 1;
    ml_hooks_scan(ML_HOOK_NOW, NULL, 0);
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

void ml_loader_watch(void)
{
    static int done;
    if (done++)
        return;
    uintptr_t brk = _r_debug.r_brk;
    uintptr_t at = brk ? jump_site(brk) : 0;
    if (!at) {
        say_blind("the loader's notification (_dl_debug_state) is not one this runtime can hook");
        return;
    }
    intptr_t rel = (intptr_t)((uintptr_t)&ml_loader_event - (at + 5));
    if (rel != (int32_t)rel) {
        say_blind("the loader is more than 2 GiB away from the runtime");
        return;
    }
    struct ml_patch p;
    memset(&p, 0, sizeof p);
    p.site = at;
    p.len = 5;
    memcpy(p.old, (const void *)at, 5);
    p.code[0] = 0xe9;
    int32_t r32 = (int32_t)rel;
    memcpy(&p.code[1], &r32, 4);
    if (ml_patch_write(&p) != 0)
        say_blind("the loader's code cannot be written");
}
