/* set*id: the runtime's thread is ended around every call that changes the process's credentials.
 *
 * glibc applies setuid, setgid, setgroups and the rest to every thread of the process (it signals
 * each one, which makes the same system call there) and aborts the process ("setxid
 * inconsistency") when the call fails on one thread after succeeding on another. The runtime's
 * thread (control/ctl.c) can fail where the caller succeeds: capabilities and PR_SET_KEEPCAPS are
 * per thread, so a program that keeps capabilities across a uid switch (keepcaps -> setresuid ->
 * capset -> setresgid, as setpriv and many daemons do) has CAP_SETGID in its own thread only, and
 * setresgid failed in ours: SIGABRT, every time (issue 29).
 *
 * What we do: end the thread before the call (ml_ctl_pause keeps its socket) and start a new one
 * after it, from the caller (ml_ctl_resume), so the new thread is created with the caller's new
 * credentials and capabilities. Why not keep the thread and make it follow: the program changes
 * its capabilities and keepcaps with raw per-thread system calls we do not see, and a thread of
 * ours with older, higher credentials in a process that dropped them would undo the drop (a root
 * thread listening on a socket in a process that gave root up). A thread created after the call
 * has exactly what the caller has. The cost is a thread ended and created per call (~100 us).
 *
 * Interposed by name (LD_PRELOAD), and in a runtime loaded by `memlens attach` through the GOT
 * slots attach patches (intercept/got.c). Calls glibc makes internally (initgroups' setgroups) do
 * not pass here, so initgroups is wrapped as a whole. A vfork child (another pid, our memory) calls
 * straight through: the thread is its parent's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <unistd.h>

#include "../control/ctl.h"
#include "setxid.h"

/* One change of credentials at a time: a second thread's call must not run while ours is being
 * started again. */
static pthread_mutex_t setid_lock = PTHREAD_MUTEX_INITIALIZER;

void ml_setxid_fork_child(void) { pthread_mutex_init(&setid_lock, NULL); }

static void *real(const char *name, void **slot)
{
    if (!*slot)
        *slot = dlsym(RTLD_NEXT, name);
    return *slot;
}

/* Run the call with the runtime's thread ended. */
#define AROUND(name, type, args)                                                                   \
    static void *fn;                                                                               \
    __typeof__(type) f = (__typeof__(type))real(name, &fn);                                                                \
    if (!f) {                                                                                      \
        errno = ENOSYS;                                                                            \
        return -1;                                                                                 \
    }                                                                                              \
    if ((int64_t)getpid() != ml_cfg.pid)                                                           \
        return f args;                                                                             \
    pthread_mutex_lock(&setid_lock);                                                               \
    int paused = ml_ctl_pause(1);                                                                  \
    int r = f args;                                                                                \
    int e = errno;                                                                                 \
    if (paused)                                                                                    \
        ml_ctl_resume();                                                                           \
    pthread_mutex_unlock(&setid_lock);                                                             \
    errno = e;                                                                                     \
    return r

ML_EXPORT int setuid(uid_t u) { AROUND("setuid", int (*)(uid_t), (u)); }
ML_EXPORT int setgid(gid_t g) { AROUND("setgid", int (*)(gid_t), (g)); }
ML_EXPORT int seteuid(uid_t u) { AROUND("seteuid", int (*)(uid_t), (u)); }
ML_EXPORT int setegid(gid_t g) { AROUND("setegid", int (*)(gid_t), (g)); }
ML_EXPORT int setreuid(uid_t r_, uid_t e_) { AROUND("setreuid", int (*)(uid_t, uid_t), (r_, e_)); }
ML_EXPORT int setregid(gid_t r_, gid_t e_) { AROUND("setregid", int (*)(gid_t, gid_t), (r_, e_)); }
ML_EXPORT int setresuid(uid_t r_, uid_t e_, uid_t s)
{
    AROUND("setresuid", int (*)(uid_t, uid_t, uid_t), (r_, e_, s));
}
ML_EXPORT int setresgid(gid_t r_, gid_t e_, gid_t s)
{
    AROUND("setresgid", int (*)(gid_t, gid_t, gid_t), (r_, e_, s));
}
ML_EXPORT int setgroups(size_t n, const gid_t *list)
{
    AROUND("setgroups", int (*)(size_t, const gid_t *), (n, list));
}
ML_EXPORT int initgroups(const char *user, gid_t g)
{
    AROUND("initgroups", int (*)(const char *, gid_t), (user, g));
}
