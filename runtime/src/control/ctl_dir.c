/* The control socket's directory and file: `$MEMLENS_CTL_DIR/<pid>.<pidns>.sock` (default
 * `/tmp/memlens-<euid>`; <pidns> is the inode of our pid namespace, so containers sharing the
 * directory with equal pids never meet).
 *
 * Ownership is enforced here once: the directory is created 0700 (an existing one must be ours and
 * not writable by others) and the socket chmod'ed 0600, so other users cannot even connect. (The
 * thread checks every peer's credentials besides, ctl.c.) Sockets of dead pids of our namespace are
 * swept when we bind; ours is unlinked by the process that bound it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/fmt.h"
#include "../base/log.h"
#include "ctl_dir.h"

#define CTL_BACKLOG 64

static pid_t ctl_owner; /* pid that bound ctl_path: only it may unlink it */
static char ctl_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static char ctl_dirpath[sizeof ctl_path];

/* Build the directory name into `dir`; 0 or -1 if it does not fit. */
static int dir_name(char *dir, size_t cap)
{
    struct ml_buf b = {dir, 0, cap};
    dir[0] = 0;
    const char *env = ml_ctl_dir_env; /* copied at start-up: the environment may be overwritten */
    if (*env) {
        ml_buf_str(&b, env);
    } else {
        ml_buf_str(&b, "/tmp/memlens-");
        ml_buf_u64(&b, (uint64_t)geteuid());
    }
    return b.len + 1 < cap ? 0 : -1;
}

/* Create the directory 0700, or accept an existing one only if it is ours and nobody else can write
 * to it: otherwise another user could replace our socket with theirs. 0, or -1 and the reason
 * logged unless `quiet`. */
static int ensure_dir(const char *dir, int quiet)
{
    struct stat st;
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || lstat(dir, &st) != 0) {
        if (!quiet)
            ml_log("control socket disabled: cannot create or find its directory %s: %m (set "
                   "MEMLENS_CTL_DIR)", dir);
        return -1;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
        if (!quiet)
            ml_log("control socket disabled: its directory %s must be a directory of ours (uid %u) "
                   "not writable by others, and it is %s of uid %u, mode 0%o (set MEMLENS_CTL_DIR)",
                   dir, (unsigned)geteuid(), S_ISDIR(st.st_mode) ? "a directory" : "not a directory",
                   (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        return -1;
    }
    return 0;
}

/* Right after unshare(CLONE_NEWUSER), until the program writes /proc/self/uid_map, geteuid() says
 * 65534, and a directory made then would be root's /tmp/memlens-65534 on the host, locking that user
 * out of memlens for good. */
int ml_ctl_uid_mapped(void)
{
    int fd = open("/proc/self/uid_map", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1; /* no /proc: nothing to tell */
    char b[64];
    ssize_t n = read(fd, b, sizeof b);
    close(fd);
    return n > 0;
}

/* Inode of our pid namespace (0 without /proc): part of the socket name. */
static uint64_t pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Remove `<pid>.<pidns>.sock` files of processes that no longer exist (killed, or ended with _exit, which
 * skips our destructor), so the directory does not fill up over a machine's lifetime. */
static void sweep_stale(const char *dir, uint64_t ns)
{
    char suffix[32];
    struct ml_buf sb = {suffix, 0, sizeof suffix};
    ml_buf_str(&sb, ".");
    ml_buf_u64(&sb, ns);
    ml_buf_str(&sb, ".sock");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    char ents[4096] __attribute__((aligned(8)));
    long n;
    while ((n = syscall(SYS_getdents64, dfd, ents, sizeof ents)) > 0) {
        for (long off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(ents + off);
            off += d->d_reclen;
            const char *dot = strchr(d->d_name, '.');
            uint64_t pid = 0;
            for (const char *c = d->d_name; c < dot && *c >= '0' && *c <= '9'; c++)
                pid = pid * 10 + (uint64_t)(*c - '0');
            /* Only pids of our own namespace can be asked whether they live. */
            if (!dot || strcmp(dot, suffix) != 0 || pid == 0 || pid > INT32_MAX)
                continue;
            if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
                unlinkat(dfd, d->d_name, 0);
        }
    }
    close(dfd);
}

/* Bind and listen on `<dir>/<pid>.<pidns>.sock`. Returns the fd or -1 (the reason is logged
 * unless `quiet`). */
int ml_ctl_listen(int quiet)
{
    char *dir = ctl_dirpath;
    if (!ml_ctl_uid_mapped())
        return -1; /* quietly: a program in a fresh user namespace sees nothing of us */
    if (dir_name(dir, sizeof ctl_dirpath - 48) != 0) {
        if (!quiet)
            ml_log("control socket disabled: MEMLENS_CTL_DIR=%s is too long for a unix socket path "
                   "(%zu bytes, at most %zu)", ml_ctl_dir_env, strlen(ml_ctl_dir_env),
                   sizeof ctl_dirpath - 50);
        return -1;
    }
    if (ensure_dir(dir, quiet) != 0)
        return -1;
    uint64_t ns = pidns();
    sweep_stale(dir, ns);
    struct ml_buf b = {ctl_path, 0, sizeof ctl_path};
    ml_buf_str(&b, dir);
    ml_buf_str(&b, "/");
    ml_buf_u64(&b, (uint64_t)getpid());
    ml_buf_str(&b, ".");
    ml_buf_u64(&b, ns);
    ml_buf_str(&b, ".sock");

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0); /* accept_all drains it */
    if (fd < 0) {
        if (!quiet)
            ml_log("control socket disabled: cannot create a unix socket: %m");
        return -1;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, ctl_path, b.len + 1);
    /* A socket left by an earlier process with our pid (killed, or before our exec) is stale. */
    unlink(ctl_path);
    const char *call = bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ? "bind"
                       : chmod(ctl_path, 0600) != 0                      ? "chmod 0600"
                       : listen(fd, CTL_BACKLOG) != 0                    ? "listen"
                                                                         : NULL;
    if (call) {
        if (!quiet)
            ml_log("control socket disabled: cannot %s %s: %m", call, ctl_path);
        close(fd);
        return -1;
    }
    ctl_owner = getpid();
    return fd;
}

void ml_ctl_unlink(void)
{
    if (ctl_owner != 0 && ctl_owner == getpid())
        unlink(ctl_path);
    ctl_owner = 0;
}

void ml_ctl_disown(void) { ctl_owner = 0; }

const char *ml_ctl_dirpath(void) { return ctl_dirpath; }

const char *ml_ctl_path(void) { return ctl_path; }
