/* The control socket thread (ctl.c), seen from the rest of the runtime. ctl.c is the top floor:
 * the files below reach it only through these hooks, declared weak so that each call site tests
 * for them and nothing below depends on the socket being built in:
 *   ml_ctl_start        once from the constructor (init.c), after the runtime is initialised (never
 *                       from inside malloc), in the main thread; it may create the control thread.
 *   ml_ctl_atfork_child in a forked child (fork.c, after the runtime's own locks are reset): the
 *                       control thread does not exist there, so it resets its state and sets
 *                       ml_cfg.ctl_pending; the child's allocation slow path (sample.c) then calls
 *   ml_ctl_child_poll   which starts the thread once the child has lived CTL_CHILD_DELAY_MS (most
 *                       children exec or exit first, and never get one).
 *   ml_ctl_exit         the process leaves through _exit (exit.c: no destructor runs): remove the
 *                       socket.
 *   ml_ctl_pause/resume around unshare/setns (ns.c): end the thread, start a new one after.
 *   ml_ctl_thread_running  (modules.c) whether the control thread exists. */
#ifndef MEMLENS_CTL_H
#define MEMLENS_CTL_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

void ml_ctl_start(void) __attribute__((weak));
void ml_ctl_atfork_child(void) __attribute__((weak));
void ml_ctl_child_poll(void) __attribute__((weak));
void ml_ctl_exit(void) __attribute__((weak));
int ml_ctl_pause(void) __attribute__((weak));
void ml_ctl_resume(void) __attribute__((weak));
int ml_ctl_thread_running(void) __attribute__((weak));
/* The main thread's state letter from /proc (R, S, Z after pthread_exit...), 0 if unknown. */
char ml_main_state(void);

#pragma GCC visibility pop
#endif
