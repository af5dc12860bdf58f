/* Small /proc files read without stdio or malloc: safe inside malloc, in a fork child and in a signal
 * handler. The runtime reads its own stat, its threads' stat and statm this way. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fd.h"
#include "fmt.h"
#include "proc.h"

ssize_t ml_proc_read(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return n;
}

const char *ml_proc_after_comm(const char *stat)
{
    const char *p = strrchr(stat, ')');
    return p ? p + 1 : NULL;
}

char ml_proc_task_state(const char *tid)
{
    char path[64];
    struct ml_buf b = {path, 0, sizeof path};
    ml_buf_str(&b, "/proc/self/task/");
    ml_buf_str(&b, tid);
    ml_buf_str(&b, "/stat");
    char s[512];
    const char *f = ml_proc_read(path, s, sizeof s) > 0 ? ml_proc_after_comm(s) : NULL;
    return f && f[0] == ' ' ? f[1] : 0;
}

int64_t ml_proc_statm_rss(const char *statm)
{
    const char *p = statm;
    while (*p && *p != ' ')
        p++;
    int64_t pages = 0;
    for (p++; *p >= '0' && *p <= '9'; p++)
        pages = pages * 10 + (*p - '0');
    return pages * (int64_t)sysconf(_SC_PAGESIZE);
}

/* The /proc files the runtime's thread reads again and again (statm, status and the main thread's
 * stat, every 100 ms to 1 s): kept open at high descriptors of ours (fd.c) and read with pread.
 * Opened anew at each look, each held the lowest free number for a moment, and a daemon that closed
 * every descriptor and reopened its stderr in that moment got its log at the next number, and we
 * then closed the number it had been given instead (issue 29, item 2: the daemon's log lost, 1 run
 * in 3). So they are opened before main (init.c, config.c), and when the program has closed them,
 * opened again only a second or two later, not while it reopens its own. One thread uses each. */
struct own_file {
    struct ml_fd f;
    time_t lost_at; /* when the program closed ours: not opened again for a second */
};
static struct own_file own_statm = {ML_FD_NONE, 0}, own_status = {ML_FD_NONE, 0}, own_main = {ML_FD_NONE, 0};

static ssize_t own_read(struct own_file *o, const char *path, char *buf, size_t cap)
{
    int had = o->f.ino != 0, fd = ml_fd_get(&o->f);
    if (fd < 0 && had && !o->lost_at) {
        o->lost_at = time(NULL); /* it closes descriptors now: it may be reopening its own */
        return -1;
    }
    if (fd < 0 && o->lost_at && time(NULL) - o->lost_at < 2)
        return -1;
    o->lost_at = 0;
    if (fd < 0)
        fd = ml_fd_adopt(&o->f, open(path, O_RDONLY | O_CLOEXEC));
    ssize_t n = fd < 0 ? -1 : pread(fd, buf, cap - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return n;
}

int64_t ml_proc_rss_own(void)
{
    char buf[128];
    return own_read(&own_statm, "/proc/self/statm", buf, sizeof buf) > 0 ? ml_proc_statm_rss(buf) : -1;
}

char ml_proc_main_state(void)
{
    char path[64], s[512];
    struct ml_buf b = {path, 0, sizeof path};
    ml_buf_str(&b, "/proc/self/task/");
    ml_buf_u64(&b, (uint64_t)getpid());
    ml_buf_str(&b, "/stat");
    const char *f = own_read(&own_main, path, s, sizeof s) > 0 ? ml_proc_after_comm(s) : NULL;
    return f && f[0] == ' ' ? f[1] : 0;
}

/* Seccomp: in /proc/self/status, as last read (-1 unknown). */
static _Atomic int seccomp_mode = -1;

static int seccomp_in(const char *status)
{
    const char *p = strstr(status, "\nSeccomp:");
    if (!p)
        return -1;
    for (p += 9; *p == ' ' || *p == '\t'; p++)
        ;
    return *p >= '0' && *p <= '9' ? *p - '0' : -1;
}

int ml_seccomp_refresh(void)
{
    char b[4096];
    int mode = own_read(&own_status, "/proc/self/status", b, sizeof b) > 0 ? seccomp_in(b) : -1;
    atomic_store_explicit(&seccomp_mode, mode, memory_order_relaxed);
    return mode;
}

int ml_seccomp_filtered(void)
{
    int m = atomic_load_explicit(&seccomp_mode, memory_order_relaxed);
    if (m >= 0)
        return m > 0;
    /* any thread may ask: a read of its own, not the runtime thread's descriptor */
    char b[4096];
    return ml_proc_read("/proc/self/status", b, sizeof b) > 0 && seccomp_in(b) > 0;
}

void ml_proc_fork_child(void)
{
    /* opened by the parent, they read the parent's files: our copies go, reopened at the next look */
    struct own_file *all[] = {&own_statm, &own_status, &own_main};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++) {
        ml_fd_close(&all[i]->f);
        all[i]->lost_at = 0;
    }
}

int64_t ml_proc_rss_at(struct ml_fd *statm)
{
    char buf[128];
    int fd = ml_fd_get(statm);
    if (fd < 0)
        fd = ml_fd_adopt(statm, open("/proc/self/statm", O_RDONLY | O_CLOEXEC));
    ssize_t n = fd < 0 ? -1 : pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return ml_proc_statm_rss(buf);
}
