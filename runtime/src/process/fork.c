/* fork: the child gets its own profile. Our locks are taken around fork() so the child never inherits
 * one held by a thread that does not exist there; the child then zeroes the cumulative counters (they
 * belong to the parent's profile), keeps the live blocks it inherited (block.c: its peak and timeline
 * start from them), draws a sampling process of its own (with the parent's random state every child
 * would sample the same allocations) and dumps under its own pid. Its state goes into a file of its
 * own first (state.c), before the child can sample, drop its privileges or chroot. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "../base/log.h"
#include "../base/proc.h"
#include "../control/ctl.h"
#include "../control/dump.h"
#include "../record/block.h"
#include "../record/lifetime.h"
#include "../record/range.h"
#include "../sample/sample.h"
#include "../store/modules.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "fork.h"
#include "setxid.h"

static void prepare(void)
{
    ml_dump_lock();
    ml_range_lock();
    ml_state_fork_prepare(); /* no block event runs now: the header the child starts from */
}

static void parent(void)
{
    ml_range_unlock();
    ml_dump_unlock();
}

static void child(void)
{
    ml_range_reset_lock();
    ml_dump_lock_reset();
    ml_modules_reset_lock();
    ml_state_fork_child();
    ml_cfg.pid = getpid();
    ml_cfg.is_fork_child = 1;
    atomic_store(&ml_cfg.exit_dumped, 0);
    ml_stacks_fork_child();
    ml_blocks_fork_child();
    ml_views_fork_child();
    ml_sample_fork_child();
    ml_state_zero_counters();
    atomic_store(&ml_cfg.start_ns, ml_now_ns());
    ml_ctl_atfork_child();
    ml_setxid_fork_child();
    ml_proc_fork_child();
}

void ml_fork_setup(void)
{
    int e = pthread_atfork(prepare, parent, child);
    if (e != 0) {
        errno = e;
        ml_fail("cannot install the fork handlers: pthread_atfork: %m");
    }
}
