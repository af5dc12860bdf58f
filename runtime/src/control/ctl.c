/* The control socket's thread: lets `memlens ctl PID …` start, stop, dump and query a running process
 * without its cooperation. It listens on the socket (ctl_dir.c), reads one request line from each
 * connection and answers it with one line (the protocol: ctl_proto.c).
 *
 * Requests are read from up to CTL_CLIENTS connections at once (poll), each within CTL_REQUEST_MS,
 * so an idle client delays nobody. Every connection's peer credentials (SO_PEERCRED, set by the
 * kernel) must carry our effective uid or uid 0, otherwise the request is refused (the directory's
 * and the socket's modes keep other users out already: ctl_dir.c).
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
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../base/fmt.h"
#include "../base/log.h"
#include "../base/proc.h"
#include "blind.h"
#include "ctl.h"
#include "ctl_dir.h"
#include "ctl_proto.h"

#define CTL_REQUEST_MS 2000  /* the whole request line must arrive within this */
#define CTL_STACK (256 * 1024)
#define CTL_CHILD_DELAY_MS 200 /* a forked child starts its control thread after this */
#define CTL_CLIENTS 16       /* connections read at once */

static int ctl_fd = -1; /* listening socket, or -1 */
/* The thread: NONE, RUNNING, or STOPPING (ml_ctl_pause asked it to end and will join it). */
enum { T_NONE, T_RUNNING, T_STOPPING };
static _Atomic int thread_state;
static pthread_t ctl_thread;

static void ml_ctl_defer(void);

/* ---- is anyone left? ---- */

/* True when every thread but this one has exited (main() called pthread_exit and the program's
 * threads are done): the process would have ended without us. */
static int others_gone(void)
{
    char me[ML_FMT_MAX];
    char st = ml_proc_main_state();
    if (st != 'Z' && st != 'X' && st != 0)
        return 0; /* the cheap, usual answer: main is alive */
    ml_fmt_u64(me, (uint64_t)gettid(), 0);
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
            char s = ml_proc_task_state(d->d_name);
            if (s != 'Z' && s != 'X' && s != 0)
                alive = 1;
        }
    }
    close(dfd);
    return !alive;
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
    char line[ML_CTL_LINE_MAX];
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
 * A refused peer's request is read first all the same: closing with unread data would reset the
 * connection and lose the reply that tells them why. */
static void answer(struct client *k, int complete)
{
    char reply[ML_CTL_LINE_MAX + 256];
    struct ml_buf r = {reply, 0, sizeof reply - 1};
    reply[0] = 0;
    ml_ctl_reply(k->line, k->len, complete, k->too_long, peer_allowed(k->fd), &r);
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
           ml_ctl_path(), ctl_fd, (int)getpid());
    ml_ctl_unlink();
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
        if (stopping() || (fd = ml_ctl_listen(1)) < 0)
            return thread_done();
        ctl_fd = fd;
    }
    int64_t idle_check = now_ms() + 1000;
    ml_blind_check(); /* its baseline: the resident memory when profiling began */
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
            ml_blind_check(); /* a heap growing where nothing is sampled (blind.c) */
        }
    }
    /* Every other thread is gone: returning lets glibc end the process, exactly as it would have
     * without us. */
    ml_ctl_unlink();
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
            ml_ctl_unlink();
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
    int fd = ml_ctl_listen(0);
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
        ml_ctl_unlink();
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
    if (!ml_ctl_uid_mapped()) {
        /* A new user namespace whose map the program writes next (unshare -r does): listen later,
         * from the allocation slow path, as a fork child does, once the map is there. */
        ml_ctl_defer();
        return;
    }
    int fd = ml_ctl_listen(1);
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
    ml_ctl_disown();
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
    ml_ctl_unlink();
}

/* _exit (exit.c) skips destructors: the socket goes all the same (`sh -c true` left one). */
void ml_ctl_exit(void) { ml_ctl_unlink(); }
