/* unshare/setns: joining or creating some namespaces (a user namespace, a mount namespace with
 * setns) requires a single-threaded process, and the control thread (ctl.c) would make every
 * program fail them with EINVAL. So the thread is ended around the call and started again after. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <time.h>

#include "../control/ctl.h"

/* Call `fn` with the control thread ended. The kernel removes an exited thread from the thread group
 * shortly after pthread_join returns, so EINVAL is retried for a while (only when we ended one). */
static int single_threaded(int (*fn)(int, int), int a, int b)
{
    int paused = ml_ctl_pause(0);
    int r = fn(a, b);
    for (int i = 0; r != 0 && errno == EINVAL && paused && i < 200; i++) {
        struct timespec d = {.tv_nsec = 1000 * 1000};
        nanosleep(&d, NULL);
        r = fn(a, b);
    }
    int e = errno;
    if (paused)
        ml_ctl_resume();
    errno = e;
    return r;
}

static int (*real_unshare)(int);
static int (*real_setns)(int, int);

static int call_unshare(int flags, int unused)
{
    (void)unused;
    return real_unshare(flags);
}

static int call_setns(int fd, int type) { return real_setns(fd, type); }

ML_EXPORT int unshare(int flags)
{
    if (!real_unshare)
        real_unshare = (int (*)(int))dlsym(RTLD_NEXT, "unshare");
    if (!real_unshare) {
        errno = ENOSYS;
        return -1;
    }
    return single_threaded(call_unshare, flags, 0);
}

ML_EXPORT int setns(int fd, int nstype)
{
    if (!real_setns)
        real_setns = (int (*)(int, int))dlsym(RTLD_NEXT, "setns");
    if (!real_setns) {
        errno = ENOSYS;
        return -1;
    }
    return single_threaded(call_setns, fd, nstype);
}
