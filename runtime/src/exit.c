/* The dump at exit: from the library destructor (after the program's own atexit handlers and static
 * destructors), or from _exit/_Exit, which skip destructors and are how forked children often leave. */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

#include "rt.h"

static void exit_dump(void)
{
    if (!ml_cfg.out || atomic_load(&ml_cfg.failed))
        return;
    /* A vfork child shares our memory and has another pid: it must not write the parent's profile. */
    if ((int64_t)getpid() != ml_cfg.pid)
        return;
    if (atomic_exchange(&ml_cfg.exit_dumped, 1))
        return;
    int r = ml_dump_auto(ml_cfg.is_fork_child ? "fork-child-exit" : "exit");
    if (r < 0)
        ml_log("cannot write the profile dump at exit");
}

__attribute__((destructor(101))) static void ml_destructor(void) { exit_dump(); }

ML_EXPORT void _exit(int status)
{
    exit_dump();
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

ML_EXPORT void _Exit(int status) { _exit(status); }
