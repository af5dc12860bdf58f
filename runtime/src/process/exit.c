/* The dump at exit: from the library destructor (after the program's own atexit handlers and static
 * destructors), or from _exit/_Exit, which skip destructors and are how forked children often leave.
 * A process that leaves by neither (exit_group, a signal) still has its state file (state.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../base/log.h"
#include "../control/ctl.h"
#include "../control/dump.h"
#include "../store/state.h"

static void exit_dump(void)
{
    if (!ml_cfg.out || atomic_load(&ml_cfg.failed))
        return;
    /* A vfork child shares our memory and has another pid: it must not write the parent's profile. */
    if ((int64_t)getpid() != ml_cfg.pid)
        return;
    if (atomic_exchange(&ml_cfg.exit_dumped, 1))
        return;
    if (ml_state_table_inherited()) {
        /* a fork child that never sampled nor freed a sampled block: nothing of its own (its
         * inherited live blocks are in its parent's profile) */
        ml_state_final(ML_SEQ_NOTHING);
        return;
    }
    uint64_t seq;
    int r = ml_dump_auto_seq(ml_cfg.is_fork_child ? "fork-child-exit" : "exit", &seq);
    if (r == 0) {
        ml_state_final(seq);
        return;
    }
    /* The state file (status still "running") holds what fitted; it says why there is no dump.
     * Without one the profile is lost: said once, by the process itself (a fork child's parent
     * has said it already). */
    atomic_store(&ml_st->dump_errno, (uint32_t)-r);
    if (!ml_state_in_file() && !ml_cfg.is_fork_child) {
        errno = -r;
        ml_log("cannot write the profile dump at exit (%s.%d.<n>.raw): %m", ml_cfg.out, (int)getpid());
    }
}

__attribute__((destructor(101))) static void ml_destructor(void) { exit_dump(); }

ML_EXPORT void _exit(int status)
{
    exit_dump();
    /* the destructors that would remove the control socket do not run */
    if ((int64_t)getpid() == ml_cfg.pid)
        ml_ctl_exit();
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

ML_EXPORT void _Exit(int status) { _exit(status); }
