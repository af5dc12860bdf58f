/* The control socket's thread (ctl.c), seen from the rest of the runtime.
 *
 * Called from the floor above (process/):
 *   ml_ctl_start        once from the constructor (init.c), after the runtime is initialised (never
 *                       from inside malloc), in the main thread; it may create the control thread.
 *   ml_ctl_atfork_child in a forked child (fork.c, after the runtime's own locks are reset): the
 *                       control thread does not exist there, so it resets its state and sets
 *                       ml_cfg.ctl_pending; ml_ctl_child_poll (below) starts it later.
 *   ml_ctl_exit         the process leaves through _exit (exit.c: no destructor runs): remove the
 *                       socket.
 *   ml_ctl_pause/resume around unshare/setns (ns.c) and set*id (setxid.c): end the thread (and, but
 *                       for set*id, its socket), start a new one after, created by the caller.
 *
 * Hooks the floors below call up through, declared weak so that each call site tests for them (the
 * only calls in the runtime that go up a floor):
 *   ml_ctl_child_poll      the fork child's allocation slow path (sample/sample.c) while
 *                          ml_cfg.ctl_pending: starts the thread once the child has lived
 *                          CTL_CHILD_DELAY_MS (most children exec or exit first, and never get one).
 *   ml_ctl_thread_running  (store/modules.c) whether the control thread exists. */
#ifndef MEMLENS_CTL_H
#define MEMLENS_CTL_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

void ml_ctl_start(void);
void ml_ctl_atfork_child(void);
void ml_ctl_exit(void);
/* End the runtime's thread (woken, joined) so that the process has none of ours; with
 * `keep_socket` 0 the socket goes too (a new one is bound by ml_ctl_resume). 1 if a thread was
 * ended (then ml_ctl_resume starts a new one). */
int ml_ctl_pause(int keep_socket);
void ml_ctl_resume(void);
/* attach.c: the thread must run (its module watcher), with or without a socket. */
void ml_ctl_need_thread(void);
/* Open the control socket and start the thread now, wherever the process is (reach.c): 1 started,
 * 0 open already, -1 could not (no socket could be bound, or no thread created), -2 busy (the
 * calling thread holds the thread's life lock: try again). */
int ml_ctl_open_now(void);
void ml_ctl_child_poll(void) __attribute__((weak));
int ml_ctl_thread_running(void) __attribute__((weak));

#pragma GCC visibility pop
#endif
