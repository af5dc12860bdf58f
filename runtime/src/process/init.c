/* The library constructor: the top floor, the one place that starts everything. ml_init (boot.c)
 * may already have run inside an early malloc; the constructor then does what must not run inside
 * an arbitrary malloc call, because it takes loader locks or allocates: the unwinder (dlopen of
 * libunwind), the fork handlers, the module list and the control thread. Nothing calls back up
 * into this file. */
#include "../base/proc.h"
#include "../control/ctl.h"
#include "../intercept/boot.h"
#include "../intercept/finder.h"
#include "../store/modules.h"
#include "../store/state.h"
#include "../unwind/unwind.h"
#include "fork.h"

__attribute__((constructor(101))) static void ml_constructor(void)
{
    ml_init();
    ml_tls.busy++;
    ml_unwind_setup();
    atomic_store(&ml_st->unwinder, (uint32_t)ml_cfg.unwinder); /* as setup settled it */
    ml_fork_setup();
    ml_state_modules_init();
    if (ml_hooks_at_start()) /* allocators linked into the program (issue 35); attach.c plans its own */
        ml_hooks_scan(ML_HOOK_NOW, NULL, 0);
    ml_tls.busy--;
    ml_cfg.ready = 1;
    ml_proc_rss_own(); /* its descriptor opened here, before main: not while the program sets up its own */
    ml_ctl_start();
}
