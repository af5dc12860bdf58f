/* memlens_ctl_open: the entry `memlens ctl` calls from outside when a process maps the runtime but
 * has no control socket — a child forked after an attach or under `run --inactive` that has not
 * allocated since it lived 200 ms (a postgres backend idle in recv() may not for minutes), or a
 * program that closed our socket more often than we listen again.
 *
 * memlens (crates/memlens-attach, wake.rs) stops one thread of the process where attach would (never
 * inside the allocator, the loader, fork or pthread_create), calls this with ptrace as attach calls
 * mmap, and lets the thread go. Nothing here runs in a process nobody asks about: a fork+exec child
 * pays nothing, and the thread it starts is the lazy start's own (ended around set*id and unshare).
 *
 * Returns 1 (started), 0 (open already), -1 (the socket or its thread could not be made) or -2 (the
 * stopped thread was starting or ending our thread itself: try again). */
#include "../base/rt.h"
#include "ctl.h"

ML_EXPORT int memlens_ctl_open(void) { return ml_ctl_open_now(); }
