/* The runtime's thread: the one thread memlens adds to a program. It serves the control socket
 * (`memlens ctl PID …` starts, stops, dumps and queries a running process without its cooperation:
 * connections in ctl_conn.c, the protocol in ctl_proto.c, the socket's file in ctl_dir.c), reads the
 * allocator's figures for the timeline off the program's threads (record/allocstats.c), and, in a
 * runtime loaded by `memlens attach`, patches the modules dlopen'ed later (attach.c).
 *
 * Rules this thread lives by, because it runs inside someone else's program:
 * - it never calls malloc (fixed buffers, hand-rolled formatting; strerrordesc_np does not allocate);
 * - all signals are blocked in it, so the program's signal handling is unchanged;
 * - it never keeps the process alive: if main() called pthread_exit() and every other thread is gone,
 *   it leaves too (polling once a second), which lets glibc end the process as it would without us;
 * - its descriptors (the socket, its connections, the eventfd that wakes it) are high and checked
 *   before each use (base/fd.c); a socket the program closed is listened on again under a new
 *   descriptor (at most MAX_RELISTEN times), never used again;
 * - it is ended around what needs a thread of the program's own, or none of ours: unshare/setns
 *   (ns.c: some namespaces need a single-threaded process) and every set*id call (setxid.c: glibc
 *   applies them to every thread, and this one may lack the capabilities the caller kept);
 *   ml_ctl_pause ends it (woken through the eventfd, joined) and ml_ctl_resume starts a new one,
 *   created by the caller after its call, so it has the caller's credentials, never older ones;
 * - fork: the child closes its copies of our descriptors and, after 200 ms (lazily: most children
 *   exec or exit first), listens on its own `<childpid>.<pidns>.sock`; a child that never allocates
 *   is made to open it at once by `memlens ctl` (ml_ctl_open_now, reach.c);
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
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../base/fd.h"
#include "../base/fmt.h"
#include "../base/log.h"
#include "../base/proc.h"
#include "../base/views.h"
#include "../record/allocstats.h"
#include "attach.h"
#include "blind.h"
#include "ctl.h"
#include "ctl_conn.h"
#include "ctl_dir.h"

#define CTL_STACK (256 * 1024)
#define CTL_CHILD_DELAY_MS 200 /* a forked child starts its control thread after this */
#define MAX_RELISTEN 8         /* sockets closed by the program that we replace */

static struct ml_fd ctl_f = ML_FD_NONE;  /* the listening socket */
static struct ml_fd wake_f = ML_FD_NONE; /* an eventfd: ml_ctl_pause wakes the thread with it */
static int listening;                    /* we had a socket: one the program closed is replaced */
static int relistens;
/* The thread: NONE, RUNNING, or STOPPING (ml_ctl_pause asked it to end and will join it). */
enum { T_NONE, T_RUNNING, T_STOPPING };
static _Atomic int thread_state;
static _Atomic int needed; /* attached: the thread runs even without a socket (attach.c's watcher) */
static pthread_t ctl_thread;
/* Held while the thread is being started or ended, so that a pause never joins a thread whose
 * pthread_t is not written yet (a fork child starting its thread while another of its threads calls
 * setuid). Never held by the thread itself. */
static _Atomic int life_lock;

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

/* ---- the listening socket ---- */

static int listen_now(int quiet)
{
    int fd = ml_fd_adopt(&ctl_f, ml_ctl_listen(quiet));
    if (fd >= 0)
        listening = 1;
    return fd;
}

/* Our listening socket, or -1. A daemon that closes every descriptor closes it too (the number may
 * be its own TCP socket now, which we must never accept on): we listen again under a new one,
 * quietly, a few times. */
static int listener(void)
{
    int fd = ml_fd_get(&ctl_f);
    if (fd >= 0 || !listening)
        return fd;
    ml_ctl_unlink(); /* the file names our closed socket */
    listening = 0;
    if (relistens >= MAX_RELISTEN)
        return -1;
    relistens++;
    return listen_now(1);
}

/* The eventfd that wakes the thread, made (or made again, if the program closed ours) by whoever
 * needs it. */
static int waker(void)
{
    int fd = ml_fd_get(&wake_f);
    return fd >= 0 ? fd : ml_fd_adopt(&wake_f, eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
}

static void wake_thread(void)
{
    int fd = ml_fd_get(&wake_f);
    uint64_t one = 1;
    if (fd >= 0 && write(fd, &one, sizeof one) < 0)
        return; /* the counter is full: the thread is being woken anyway */
}

/* ---- the thread ---- */

static int stopping(void) { return atomic_load(&thread_state) == T_STOPPING; }

/* The thread ends on its own (nothing left to serve, or the process is done): nobody will join it. */
static void *thread_done(void)
{
    ml_conns_close();
    int running = T_RUNNING;
    if (atomic_compare_exchange_strong(&thread_state, &running, T_NONE))
        pthread_detach(pthread_self());
    return NULL;
}

/* The thread's own duties besides the socket; the ms until the next one is due (or `wake` - now). */
static int64_t duties(int64_t now, int64_t wake)
{
    int64_t d = -1;
    if (atomic_load_explicit(&ml_views_on, memory_order_relaxed) &&
        atomic_load_explicit(&ml_cfg.active, memory_order_relaxed))
        d = ml_allocstats_poll();
    int64_t a = ml_attach_tick();
    if (a >= 0 && (d < 0 || a < d))
        d = a;
    return d >= 0 && now + d < wake ? d : wake - now;
}

/* One turn: poll the socket, the eventfd and the connections until something happens or a duty is
 * due. 1 to go on, 0 when the thread should end. */
static int serve(int64_t *idle_check)
{
    struct pollfd p[2 + ML_CONNS];
    int tag[2 + ML_CONNS], n = 0;
    int lfd = listener(), wfd = waker();
    if (lfd < 0 && !atomic_load(&needed))
        return 0; /* nothing left to serve */
    if (lfd >= 0)
        tag[n] = -1, p[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
    if (wfd >= 0)
        tag[n] = -2, p[n++] = (struct pollfd){.fd = wfd, .events = POLLIN};
    int64_t now = ml_conns_now_ms(), wake = *idle_check;
    ml_conns_poll_set(now, p, tag, &n, &wake);
    int64_t left = duties(now, wake);
    int r = poll(p, (nfds_t)n, left > 0 ? (int)left : 0);
    if (stopping())
        return 0; /* ml_ctl_pause woke us, and joins us */
    for (int i = 0; r > 0 && i < n; i++) {
        if (!p[i].revents)
            continue;
        if (tag[i] == -1) {
            int fd = ml_fd_get(&ctl_f); /* still ours: else never accept on that number */
            if (fd >= 0 && ml_conns_accept(fd) != 0)
                ml_fd_close(&ctl_f);
        } else if (tag[i] == -2) {
            uint64_t v;
            if (ml_fd_get(&wake_f) >= 0 && read(wfd, &v, sizeof v) < 0)
                continue; /* drained already */
        } else {
            ml_conns_read(tag[i]);
        }
    }
    if (ml_conns_now_ms() >= *idle_check) {
        *idle_check = ml_conns_now_ms() + 1000;
        ml_seccomp_refresh(); /* a filter the program installed since (base/proc.h) */
        if (others_gone())
            return 0;
        ml_blind_check(); /* a heap growing where nothing is sampled (blind.c) */
    }
    return 1;
}

static void *ctl_main(void *arg)
{
    /* Whatever this thread allocates (glibc internals, never us) is the runtime's, not the program's. */
    ml_tls.busy++;
    pthread_setname_np(pthread_self(), "memlens"); /* what `top -H` and /proc/PID/task show */
    if (arg) {
        /* Forked child (ml_ctl_child_poll): bind here, not in the allocating thread that started us;
         * quietly, as after unshare: the parent said at start-up what was wrong with the directory,
         * and the child may have entered other namespaces since. */
        if (stopping() || (listen_now(1) < 0 && !atomic_load(&needed)))
            return thread_done();
    }
    int64_t idle_check = ml_conns_now_ms() + 1000;
    ml_blind_check(); /* its baseline: the resident memory when profiling began */
    while (serve(&idle_check))
        ;
    if (!stopping() && others_gone()) {
        /* Every other thread is gone: returning lets glibc end the process, exactly as it would
         * have without us. */
        ml_ctl_unlink();
        ml_fd_close(&ctl_f);
        listening = 0;
    }
    return thread_done();
}

/* Start the thread (binding its socket first when `bind_first`) with every signal blocked: it
 * inherits the mask, so signals keep going to the program's own threads. */
static void ctl_spawn_locked(int bind_first, int quiet);

static void ctl_spawn(int bind_first, int quiet)
{
    ml_spin_lock(&life_lock);
    ctl_spawn_locked(bind_first, quiet);
    ml_spin_unlock(&life_lock);
}

static void ctl_spawn_locked(int bind_first, int quiet)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, CTL_STACK);
    sigset_t all, old;
    sigfillset(&all);
    waker();
    pthread_sigmask(SIG_SETMASK, &all, &old);
    atomic_store(&thread_state, T_RUNNING);
    int e = pthread_create(&ctl_thread, &attr, ctl_main, bind_first ? (void *)1 : NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        atomic_store(&thread_state, T_NONE);
        if (!quiet) {
            errno = e;
            ml_log("control socket disabled: cannot create its thread (a %u KiB stack): "
                   "pthread_create: %m", (unsigned)(CTL_STACK >> 10));
        }
        if (!bind_first) {
            ml_ctl_unlink();
            ml_fd_close(&ctl_f);
            listening = 0;
        }
    }
}

int ml_ctl_thread_running(void) { return atomic_load(&thread_state) == T_RUNNING; }

/* At start-up the socket is bound before main() runs, so `memlens ctl` works from the first moment. */
void ml_ctl_start(void)
{
    if (ml_fd_get(&ctl_f) >= 0 || listen_now(0) < 0)
        return;
    ctl_spawn(0, 0);
}

void ml_ctl_need_thread(void)
{
    atomic_store(&needed, 1);
    if (atomic_load(&thread_state) == T_NONE && !atomic_load(&ml_cfg.ctl_pending))
        ctl_spawn(0, 1);
}

int ml_ctl_pause(int keep_socket)
{
    int running = T_RUNNING;
    ml_spin_lock(&life_lock);
    if (!atomic_compare_exchange_strong(&thread_state, &running, T_STOPPING)) {
        ml_spin_unlock(&life_lock);
        return 0;
    }
    wake_thread(); /* its poll() returns at once (or at its next timeout, if the program closed the eventfd) */
    pthread_join(ctl_thread, NULL);
    if (!keep_socket) {
        ml_ctl_unlink();
        ml_fd_close(&ctl_f);
        listening = 0;
    }
    /* still under the lock: a spawn between the unlock and this store would be forgotten */
    atomic_store(&thread_state, T_NONE);
    ml_spin_unlock(&life_lock);
    return 1;
}

/* Start again after ml_ctl_pause: on the same socket (set*id), or on a new one (after unshare/setns:
 * quietly, as in a new user namespace the directory may no longer look like ours, and the program's
 * output must not change because of it), or with none if only attach's watcher needs the thread. */
void ml_ctl_resume(void)
{
    if (ml_fd_get(&ctl_f) < 0) {
        if (!ml_ctl_uid_mapped()) {
            /* A new user namespace whose map the program writes next (unshare -r does): listen
             * later, from the allocation slow path, as a fork child does, once the map is there. */
            ml_ctl_defer();
            return;
        }
        if (listen_now(1) < 0 && !atomic_load(&needed))
            return;
    }
    ctl_spawn(0, 1);
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
    /* The parent's thread does not exist here, and our descriptors are copies of the parent's (its
     * socket, its connections, the eventfd that wakes its thread): ours are closed (not those the
     * program closed meanwhile), the parent's socket file is left alone. No thread is started here: a
     * fork child that execs or exits at once (most do) must stay single-threaded and leave no
     * socket behind; ml_ctl_child_poll starts one once the child has lived a while. */
    atomic_store(&life_lock, 0); /* a thread of the parent may have held it */
    ml_fd_close(&ctl_f);
    ml_fd_close(&wake_f);
    ml_conns_close();
    listening = 0;
    relistens = 0;
    ml_ctl_disown();
    atomic_store(&thread_state, T_NONE);
    ml_ctl_defer();
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
    ctl_spawn(1, 1);
    ml_tls.busy--;
}

/* Called from outside (reach.c's memlens_ctl_open, made by `memlens ctl` through ptrace in a
 * stopped thread of the process): open the channel now, in a fork child that has not (it need not
 * allocate first), or after the program closed our socket. What it starts is what the lazy start
 * would have: the same thread, the same socket, paused around set*id and unshare alike. */
int ml_ctl_open_now(void)
{
    if (atomic_load(&thread_state) != T_NONE && ml_fd_get(&ctl_f) >= 0)
        return 0; /* open already */
    /* The stopped thread may be the one holding the lock (ml_ctl_pause around its setuid): waiting
     * would never end. Then the caller tries again later. */
    if (atomic_exchange_explicit(&life_lock, 1, memory_order_acquire))
        return -2;
    int r = -1;
    ml_tls.busy++;
    if (atomic_exchange(&ml_cfg.ctl_pending, 0))
        ctl_spawn_locked(1, 1); /* the thread binds its socket itself, as in ml_ctl_child_poll */
    else if (atomic_load(&thread_state) == T_NONE && listen_now(1) >= 0)
        ctl_spawn_locked(0, 1);
    if (atomic_load(&thread_state) == T_RUNNING)
        r = 1;
    ml_tls.busy--;
    ml_spin_unlock(&life_lock);
    return r;
}

__attribute__((destructor)) static void ctl_fini(void)
{
    ml_ctl_unlink();
}

/* _exit (exit.c) skips destructors: the socket goes all the same (`sh -c true` left one). */
void ml_ctl_exit(void) { ml_ctl_unlink(); }
