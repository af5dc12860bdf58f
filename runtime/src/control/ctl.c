/* The control socket: lets `memlens ctl PID …` start, stop, dump and query a running process without its
 * cooperation.
 *
 * One thread blocks in poll()/accept() on `$MEMLENS_CTL_DIR/<pid>.<pidns>.sock` (default
 * `/tmp/memlens-<euid>`; <pidns> is the inode of our pid namespace, so containers sharing the
 * directory with equal pids never meet). Each connection carries one request line (at most
 * CTL_LINE_MAX bytes, within CTL_REQUEST_MS) and gets one reply line:
 *
 *     start [INTERVAL]   -> ok active=1 interval=N was=0|1
 *     stop               -> ok active=0 was=0|1
 *     dump NAME          -> ok dumped NAME            (a raw dump this process writes into the
 *                                                      socket directory; the CLI moves it out)
 *     reset              -> ok reset
 *     status             -> ok pid=N active=0|1 interval=N samples=N alloc_bytes=N stacks=N truncated=N dropped=N
 *                           inuse_bytes=N dropped_bytes=N max_stacks=N table_full=N
 *                           cost_ns=N cost_calls=N cpu_ns=N
 *     jemalloc status|start LG|stop  -> jemalloc's own profiler (jeprof.c)
 *     anything else      -> error …
 *
 * Ownership is enforced twice: the directory is created 0700 and the socket chmod'ed 0600, so other
 * users cannot even connect; and every connection's peer credentials (SO_PEERCRED, set by the kernel)
 * must carry our effective uid or uid 0, otherwise the request is refused.
 *
 * Rules this thread lives by, because it runs inside someone else's program:
 * - it never calls malloc (fixed buffers, hand-rolled formatting; strerrordesc_np does not allocate);
 * - all signals are blocked in it, so the program's signal handling is unchanged;
 * - it never keeps the process alive: if main() called pthread_exit() and every other thread is gone,
 *   it leaves too (polling once a second), which lets glibc end the process as it would without us;
 * - fork: the child closes the inherited socket and, after 200 ms (lazily: most children exec or exit
 *   first), listens on its own `<childpid>.<pidns>.sock`;
 * - unshare/setns (ns.c) need a single-threaded process for some namespaces: ml_ctl_pause ends the
 *   thread around them and ml_ctl_resume starts it again;
 * - the socket file is unlinked at exit by the process that created it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/fmt.h"
#include "../base/log.h"
#include "../base/proc.h"
#include "../sample/cost.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "attach.h"
#include "control.h"
#include "ctl.h"
#include "dump.h"
#include "jeprof.h"

#define CTL_LINE_MAX 512     /* a command word and a file name */
#define CTL_REQUEST_MS 2000  /* the whole request line must arrive within this */
#define CTL_STACK (256 * 1024)
#define CTL_CHILD_DELAY_MS 200 /* a forked child starts its control thread after this */
#define CTL_CLIENTS 16       /* connections read at once */
/* The largest interval (the CLI's limit, memlens_target::MAX_INTERVAL): each countdown is drawn from
 * Exp(R) into a signed 64-bit counter. */
#define CTL_MAX_INTERVAL (1ull << 40)
#define CTL_BACKLOG 64

/* attach.c: the `attach` and `detach` requests of a runtime loaded by `memlens attach`. */

static int ctl_fd = -1;        /* listening socket, or -1 */
static pid_t ctl_owner;        /* pid that bound ctl_path: only it may unlink it */
static char ctl_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static char ctl_dirpath[sizeof ctl_path];
/* The thread: NONE, RUNNING, or STOPPING (ml_ctl_pause asked it to end and will join it). */
enum { T_NONE, T_RUNNING, T_STOPPING };
static _Atomic int thread_state;
static pthread_t ctl_thread;

static void ml_ctl_defer(void);

/* ---- small malloc-free string building ---- */

struct buf {
    char *p;
    size_t len, cap;
};

static void put_str(struct buf *b, const char *s)
{
    while (*s && b->len + 1 < b->cap)
        b->p[b->len++] = *s++;
    b->p[b->len] = 0;
}

static void put_u64(struct buf *b, uint64_t v)
{
    char tmp[ML_FMT_MAX];
    ml_fmt_u64(tmp, v, 0);
    put_str(b, tmp);
}

static void put_kv(struct buf *b, const char *key, uint64_t v)
{
    put_str(b, " ");
    put_str(b, key);
    put_str(b, "=");
    put_u64(b, v);
}

static const char *err_text(int e)
{
    const char *d = strerrordesc_np(e);
    return d ? d : "unknown error";
}

/* ---- the socket directory and file ---- */

/* Build the directory name into `dir`; 0 or -1 if it does not fit. */
static int ctl_dir(char *dir, size_t cap)
{
    struct buf b = {dir, 0, cap};
    dir[0] = 0;
    const char *env = ml_ctl_dir_env; /* copied at start-up: the environment may be overwritten */
    if (*env) {
        put_str(&b, env);
    } else {
        put_str(&b, "/tmp/memlens-");
        put_u64(&b, (uint64_t)geteuid());
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

/* Is our uid mapped in our user namespace? Right after unshare(CLONE_NEWUSER), until the program
 * writes /proc/self/uid_map, it is not: geteuid() says 65534, and a directory made then would be
 * root's /tmp/memlens-65534 on the host, locking that user out of memlens for good. */
static int uid_mapped(void)
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
    struct buf sb = {suffix, 0, sizeof suffix};
    put_str(&sb, ".");
    put_u64(&sb, ns);
    put_str(&sb, ".sock");
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
static int ctl_listen(int quiet)
{
    char *dir = ctl_dirpath;
    if (!uid_mapped())
        return -1; /* quietly: a program in a fresh user namespace sees nothing of us */
    if (ctl_dir(dir, sizeof ctl_dirpath - 48) != 0) {
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
    struct buf b = {ctl_path, 0, sizeof ctl_path};
    put_str(&b, dir);
    put_str(&b, "/");
    put_u64(&b, (uint64_t)getpid());
    put_str(&b, ".");
    put_u64(&b, ns);
    put_str(&b, ".sock");

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

static void ctl_unlink(void)
{
    if (ctl_owner != 0 && ctl_owner == getpid())
        unlink(ctl_path);
    ctl_owner = 0;
}

/* ---- is anyone left? ---- */

/* State letter of task `tid` of this process, or 0 if it cannot be read (the task is gone). */
static char task_state(const char *tid)
{
    char path[64];
    struct buf b = {path, 0, sizeof path};
    put_str(&b, "/proc/self/task/");
    put_str(&b, tid);
    put_str(&b, "/stat");
    char s[512];
    const char *f = ml_proc_read(path, s, sizeof s) > 0 ? ml_proc_after_comm(s) : NULL;
    return f && f[0] == ' ' ? f[1] : 0;
}

/* The main thread's state letter (R, S, Z...), 0 if unknown. */
char ml_main_state(void)
{
    char pid[24];
    struct buf b = {pid, 0, sizeof pid};
    put_u64(&b, (uint64_t)getpid());
    return task_state(pid);
}

/* True when every thread but this one has exited (main() called pthread_exit and the program's
 * threads are done): the process would have ended without us. */
static int others_gone(void)
{
    char me[24];
    char st = ml_main_state();
    if (st != 'Z' && st != 'X' && st != 0)
        return 0; /* the cheap, usual answer: main is alive */
    struct buf b = {me, 0, sizeof me};
    put_u64(&b, (uint64_t)gettid());
    int dfd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return 0;
    char ents[4096] __attribute__((aligned(8)));
    int alive = 0;
    long n;
    while (!alive && (n = syscall(SYS_getdents64, dfd, ents, sizeof ents)) > 0) {
        for (long off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(ents + off);
            off += d->d_reclen;
            if (d->d_name[0] < '0' || d->d_name[0] > '9' || strcmp(d->d_name, me) == 0)
                continue;
            char s = task_state(d->d_name);
            if (s != 'Z' && s != 'X' && s != 0)
                alive = 1;
        }
    }
    close(dfd);
    return !alive;
}

/* ---- one request ---- */

/* Parse a decimal byte count; -1 if `s` is not one. */
static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == 0)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

static void do_status(struct buf *r)
{
    struct ml_status s;
    ml_get_status(&s);
    put_str(r, "ok");
    put_kv(r, "pid", (uint64_t)getpid());
    put_kv(r, "active", (uint64_t)(s.active != 0));
    put_kv(r, "interval", s.interval);
    put_kv(r, "samples", s.samples);
    put_kv(r, "alloc_bytes", s.alloc_bytes);
    put_kv(r, "stacks", s.stacks);
    put_kv(r, "truncated", s.truncated);
    put_kv(r, "dropped", s.dropped);
    put_kv(r, "inuse_bytes", s.inuse_bytes);
    put_kv(r, "dropped_bytes", atomic_load(&ml_st->dropped_bytes));
    put_kv(r, "max_stacks", ml_stacks_max());
    put_kv(r, "table_full", ml_stacks_full_drops());
    uint64_t cost_ns, calls, cpu_ns; /* cost.c: what profiling has cost this process so far */
    if (ml_cost_get(&cost_ns, &calls, &cpu_ns) == 0) {
        put_kv(r, "cost_ns", cost_ns);
        put_kv(r, "cost_calls", calls);
        put_kv(r, "cpu_ns", cpu_ns);
    }
}

static void do_start(const char *arg, struct buf *r)
{
    uint64_t interval = 0;
    if (*arg && parse_u64(arg, &interval) != 0) {
        put_str(r, "error start: interval must be a number of bytes, got '");
        put_str(r, arg);
        put_str(r, "'");
        return;
    }
    if (interval > CTL_MAX_INTERVAL) {
        put_str(r, "error start: interval too large (at most 1099511627776 bytes, 1 TiB)");
        return;
    }
    if (*arg)
        ml_set_interval(interval);
    int was = ml_set_active(1);
    struct ml_status s;
    ml_get_status(&s);
    put_str(r, "ok");
    put_kv(r, "active", 1);
    put_kv(r, "interval", s.interval);
    put_kv(r, "was", (uint64_t)(was != 0));
}

/* A dump file name: letters, digits, '.', '_', '-', not starting with '.', so that the dump stays
 * in the socket directory (no '/', no "..") and is never one of our sockets. */
static int dump_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 128 || name[0] == '.' || (n >= 5 && !strcmp(name + n - 5, ".sock")))
        return 0;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            return 0;
    return 1;
}

/* The dump is written into the socket directory only: a peer with our uid must not be able to make
 * this process write files elsewhere with its rights. The CLI copies it out. */
static void do_dump(const char *name, struct buf *r)
{
    if (*name == 0) {
        put_str(r, "error dump: missing NAME");
        return;
    }
    if (!dump_name_ok(name)) {
        put_str(r, "error dump: NAME must be a plain file name (letters, digits, '.', '_', '-'); "
                   "the dump is written into the control directory");
        return;
    }
    char path[sizeof ctl_dirpath + 160];
    struct buf pb = {path, 0, sizeof path};
    put_str(&pb, ctl_dirpath);
    put_str(&pb, "/");
    put_str(&pb, name);
    const char *path_ = path;
    int e = ml_dump(path_, "ctl");
    if (e != 0) {
        put_str(r, "error cannot write dump ");
        put_str(r, path_);
        put_str(r, ": ");
        put_str(r, err_text(-e));
        return;
    }
    put_str(r, "ok dumped ");
    put_str(r, name);
}

/* Execute request `line` (NUL-terminated, no newline) and write the reply into r. */
static void handle(char *line, struct buf *r)
{
    char *arg = line;
    while (*arg && *arg != ' ')
        arg++;
    if (*arg)
        *arg++ = 0;
    if (strcmp(line, "status") == 0) {
        do_status(r);
    } else if (strcmp(line, "start") == 0) {
        do_start(arg, r);
    } else if (strcmp(line, "stop") == 0) {
        put_str(r, "ok active=0 was=");
        put_u64(r, (uint64_t)(ml_set_active(0) != 0));
    } else if (strcmp(line, "dump") == 0) {
        do_dump(arg, r);
    } else if (strcmp(line, "reset") == 0) {
        ml_reset();
        put_str(r, "ok reset");
    } else if (strcmp(line, "jemalloc") == 0) {
        ml_jemalloc_ctl(arg, r->p + r->len, r->cap - r->len);
        r->len += strlen(r->p + r->len);
    } else if (ml_attach_ctl && ml_attach_ctl(line, arg, r->p + r->len, r->cap - r->len)) {
        r->len += strlen(r->p + r->len);
    } else {
        put_str(r, "error unknown command '");
        put_str(r, line);
        put_str(r, "' (expected start, stop, dump, reset, status or jemalloc)");
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int peer_allowed(int c)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return 0;
    return cred.uid == 0 || cred.uid == geteuid();
}

/* ---- the connections being read ----
 * Requests are read from up to CTL_CLIENTS connections at once, each within its own deadline, so a
 * client that connects and says nothing (or trickles bytes) delays nobody: the others are answered
 * as soon as their line is in. Past CTL_CLIENTS the connection nearest its deadline is dropped. */
struct client {
    int fd;             /* -1: free */
    int64_t deadline;   /* CLOCK_MONOTONIC ms by which the whole line must be in */
    size_t len;
    int too_long;       /* more than a line: rejected, never executed cut short */
    char line[CTL_LINE_MAX];
};
static struct client clients[CTL_CLIENTS];

static void clients_reset(void)
{
    for (int i = 0; i < CTL_CLIENTS; i++)
        clients[i].fd = -1;
}

/* Send the whole reply (small: it fits the socket buffer), waiting at most 2 s for room. */
static void send_reply(int c, const char *reply, size_t len)
{
    int64_t deadline = now_ms() + CTL_REQUEST_MS;
    for (size_t off = 0; off < len;) {
        ssize_t n = send(c, reply + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        int64_t left = deadline - now_ms();
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || left <= 0)
            return;
        struct pollfd p = {.fd = c, .events = POLLOUT};
        poll(&p, 1, (int)left);
    }
}

/* Answer client `k` (its line is in, it is too long, it hung up or its time is up) and close it.
 * Even a refused peer's request is read first: closing with unread data would reset the
 * connection and lose the reply that tells them why. */
static void answer(struct client *k, int complete)
{
    char reply[CTL_LINE_MAX + 256];
    struct buf r = {reply, 0, sizeof reply - 1};
    reply[0] = 0;
    size_t len = k->len;
    if (len && k->line[len - 1] == '\r')
        len--;
    k->line[len] = 0;
    if (!peer_allowed(k->fd))
        put_str(&r, "error permission denied: only the owner of this process (or root) may control it");
    else if (k->too_long)
        put_str(&r, "error request too long (one line of at most 511 bytes)");
    else if (!complete || len == 0)
        put_str(&r, "error empty request (or not sent within 2 s)");
    else
        handle(k->line, &r);
    reply[r.len++] = '\n';
    send_reply(k->fd, reply, r.len);
    close(k->fd);
    k->fd = -1;
}

/* Read what client `k` has sent; answer it once its line is complete. */
static void client_read(struct client *k)
{
    for (;;) {
        char *at = k->line + k->len;
        size_t room = sizeof k->line - 1 - k->len;
        char scrap[256];
        /* A line that no longer fits is drained into scratch space until its end. */
        ssize_t n = k->too_long ? recv(k->fd, scrap, sizeof scrap, MSG_DONTWAIT)
                                : recv(k->fd, at, room, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            answer(k, k->len > 0 || k->too_long); /* EOF: a line without its newline counts */
            return;
        }
        const char *nl = memchr(k->too_long ? scrap : at, '\n', (size_t)n);
        if (!k->too_long) {
            k->len += (size_t)n;
            if (nl) {
                k->len = (size_t)(nl - k->line);
                answer(k, 1);
                return;
            }
            if (k->len + 1 >= sizeof k->line)
                k->too_long = 1;
        } else if (nl) {
            answer(k, 1);
            return;
        }
    }
}

/* A new connection: into a free slot, else in place of the one nearest its deadline. */
static void client_add(int c)
{
    struct client *k = NULL;
    for (int i = 0; i < CTL_CLIENTS && !k; i++)
        if (clients[i].fd < 0)
            k = &clients[i];
    if (!k) {
        k = &clients[0];
        for (int i = 1; i < CTL_CLIENTS; i++)
            if (clients[i].deadline < k->deadline)
                k = &clients[i];
        answer(k, 0);
    }
    k->fd = c;
    k->deadline = now_ms() + CTL_REQUEST_MS;
    k->len = 0;
    k->too_long = 0;
}

static void clients_close(void)
{
    for (int i = 0; i < CTL_CLIENTS; i++)
        if (clients[i].fd >= 0) {
            close(clients[i].fd);
            clients[i].fd = -1;
        }
}

/* ---- the thread ---- */

static int stopping(void) { return atomic_load(&thread_state) == T_STOPPING; }

/* The thread ends on its own (the channel is lost, or the process is done): nobody will join it. */
static void *thread_done(void)
{
    clients_close();
    int running = T_RUNNING;
    if (atomic_compare_exchange_strong(&thread_state, &running, T_NONE))
        pthread_detach(pthread_self());
    return NULL;
}

/* The program closed our descriptor (daemons close every fd they did not open): the number may
 * already belong to one of its own files, so leave it alone and give up the channel. */
static void ctl_lost(void)
{
    ml_log("control socket %s (fd %d) closed by the program; memlens ctl is disabled in process %d",
           ctl_path, ctl_fd, (int)getpid());
    ctl_unlink();
    ctl_fd = -1;
}

/* Accept every pending connection. 0, or -1 when the listening socket is gone. */
static int accept_all(int fd)
{
    for (;;) {
        int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c >= 0) {
            client_add(c);
            continue;
        }
        if (errno == EBADF || errno == ENOTSOCK || errno == EINVAL || errno == EOPNOTSUPP)
            return -1;
        if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN && errno != EWOULDBLOCK) {
            /* Out of descriptors or memory: the pending connection stays readable, so pause
             * rather than spin. */
            struct timespec pause = {.tv_nsec = 100 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        return errno == EINTR ? accept_all(fd) : 0;
    }
}

static void *ctl_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    /* Whatever this thread allocates (glibc internals, never us) is the runtime's, not the program's. */
    ml_tls.busy++;
    clients_reset();
    if (fd < 0) {
        /* Forked child (ml_ctl_child_poll): bind here, not in the allocating thread that started us;
         * quietly, as after unshare: the parent said at start-up what was wrong with the directory,
         * and the child may have entered other namespaces since. */
        if (stopping() || (fd = ctl_listen(1)) < 0)
            return thread_done();
        ctl_fd = fd;
    }
    int64_t idle_check = now_ms() + 1000;
    for (;;) {
        struct pollfd p[1 + CTL_CLIENTS];
        struct client *who[1 + CTL_CLIENTS];
        int n = 0;
        p[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
        int64_t now = now_ms(), wake = idle_check;
        for (int i = 0; i < CTL_CLIENTS; i++) {
            if (clients[i].fd < 0)
                continue;
            if (clients[i].deadline <= now) {
                answer(&clients[i], 0);
                continue;
            }
            wake = clients[i].deadline < wake ? clients[i].deadline : wake;
            who[n] = &clients[i];
            p[n++] = (struct pollfd){.fd = clients[i].fd, .events = POLLIN};
        }
        int r = poll(p, (nfds_t)n, wake > now ? (int)(wake - now) : 0);
        if (stopping())
            return thread_done(); /* ml_ctl_pause shut the socket down to wake us, and joins us */
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || (p[0].revents & POLLNVAL)) {
            ctl_lost();
            return thread_done();
        }
        for (int i = 1; i < n; i++)
            if (p[i].revents)
                client_read(who[i]);
        if ((p[0].revents & POLLIN) && accept_all(fd) != 0) {
            ctl_lost();
            return thread_done();
        }
        if (now_ms() >= idle_check) {
            idle_check = now_ms() + 1000;
            if (others_gone())
                break;
        }
    }
    /* Every other thread is gone: returning lets glibc end the process, exactly as it would have
     * without us. */
    ctl_unlink();
    ctl_fd = -1;
    close(fd);
    return thread_done();
}

/* Start the thread serving `fd` (or, with fd < 0, binding its own first) with every signal
 * blocked: it inherits the mask, so signals keep going to the program's own threads. */
static void ctl_spawn(int fd, int quiet)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, CTL_STACK);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    atomic_store(&thread_state, T_RUNNING);
    int e = pthread_create(&ctl_thread, &attr, ctl_main, (void *)(intptr_t)fd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        atomic_store(&thread_state, T_NONE);
        if (!quiet) {
            errno = e;
            ml_log("control socket disabled: cannot create its thread (a %u KiB stack): "
                   "pthread_create: %m", (unsigned)(CTL_STACK >> 10));
        }
        if (fd >= 0) {
            ctl_unlink();
            ctl_fd = -1;
            close(fd);
        }
    }
}

int ml_ctl_thread_running(void) { return atomic_load(&thread_state) == T_RUNNING; }

/* At start-up the socket is bound before main() runs, so `memlens ctl` works from the first moment. */
void ml_ctl_start(void)
{
    if (ctl_fd >= 0)
        return;
    int fd = ctl_listen(0);
    if (fd < 0)
        return;
    ctl_fd = fd;
    ctl_spawn(fd, 0);
}

/* End the control thread so that the process is single-threaded again (unshare(CLONE_NEWUSER) and
 * setns need that). Returns 1 if a thread was ended (ml_ctl_resume starts a new one). */
int ml_ctl_pause(void)
{
    int running = T_RUNNING;
    if (!atomic_compare_exchange_strong(&thread_state, &running, T_STOPPING))
        return 0;
    if (ctl_fd >= 0)
        shutdown(ctl_fd, SHUT_RDWR); /* wakes its poll() at once */
    pthread_join(ctl_thread, NULL);
    if (ctl_fd >= 0) {
        ctl_unlink();
        close(ctl_fd);
        ctl_fd = -1;
    }
    atomic_store(&thread_state, T_NONE);
    return 1;
}

/* Listen again after ml_ctl_pause, quietly: in a new user namespace the directory may no longer
 * look like ours, and the program's output must not change because of it. */
void ml_ctl_resume(void)
{
    if (!uid_mapped()) {
        /* A new user namespace whose map the program writes next (unshare -r does): listen later,
         * from the allocation slow path, as a fork child does, once the map is there. */
        ml_ctl_defer();
        return;
    }
    int fd = ctl_listen(1);
    if (fd < 0)
        return;
    ctl_fd = fd;
    ctl_spawn(fd, 1);
}

static uint64_t child_since_ns; /* when this fork child was born (or the thread was deferred) */

/* Start the control thread later: ml_ctl_child_poll does, from an allocation slow path. */
static void ml_ctl_defer(void)
{
    child_since_ns = ml_now_ns();
    atomic_store(&ml_cfg.ctl_pending, 1);
}

void ml_ctl_atfork_child(void)
{
    /* The parent's thread does not exist here and the inherited fd is the parent's listener: drop
     * it (without unlinking the parent's socket). No thread is started here: a fork child that
     * execs or exits at once (most do) must stay single-threaded and leave no socket behind;
     * ml_ctl_child_poll starts one once the child has lived a while. */
    if (ctl_fd >= 0)
        close(ctl_fd);
    ctl_fd = -1;
    ctl_owner = 0;
    atomic_store(&thread_state, T_NONE);
    child_since_ns = ml_now_ns();
    atomic_store(&ml_cfg.ctl_pending, 1);
}

/* From a fork child's allocation slow path (never nested inside the runtime: its allocations,
 * pthread_create's included, are forwarded while busy). The first caller after the delay starts
 * the thread; a child that allocates nothing after the delay has no channel until it does. */
void ml_ctl_child_poll(void)
{
    if (ml_now_ns() - child_since_ns < (uint64_t)CTL_CHILD_DELAY_MS * 1000000u)
        return;
    if (!atomic_exchange(&ml_cfg.ctl_pending, 0))
        return;
    ml_tls.busy++;
    ctl_spawn(-1, 1);
    ml_tls.busy--;
}

__attribute__((destructor)) static void ctl_fini(void)
{
    ctl_unlink();
}

/* _exit (exit.c) skips destructors: the socket goes all the same (`sh -c true` left one). */
void ml_ctl_exit(void) { ctl_unlink(); }
