/* The control socket's connections: requests are read from up to ML_CONNS connections at once, each
 * within its own deadline, so a client that connects and says nothing (or trickles bytes) delays
 * nobody: the others are answered as soon as their line is in. Past ML_CONNS the connection nearest
 * its deadline is answered and closed.
 *
 * Every connection is a descriptor of ours kept high and checked before each use (base/fd.c): a
 * program thread that closes every descriptor may close one while we read it, and its number may
 * be the program's own socket a moment later. A connection found closed is forgotten, never read,
 * written or closed again.
 *
 * Every connection's peer credentials (SO_PEERCRED, set by the kernel) must carry our effective
 * uid or uid 0, otherwise the request is refused (the directory's and the socket's modes keep
 * other users out already: ctl_dir.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../base/fd.h"
#include "../base/fmt.h"
#include "ctl_conn.h"
#include "ctl_proto.h"

#define CTL_REQUEST_MS 2000 /* the whole request line must arrive within this */

struct conn {
    struct ml_fd f;     /* f.fd -1: free */
    int64_t deadline;   /* CLOCK_MONOTONIC ms by which the whole line must be in */
    size_t len;
    int too_long;       /* more than a line: rejected, never executed cut short */
    char line[ML_CTL_LINE_MAX];
};
static struct conn conns[ML_CONNS];

int64_t ml_conns_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ml_conns_reset(void)
{
    for (int i = 0; i < ML_CONNS; i++)
        conns[i].f.fd = -1;
}

void ml_conns_close(void)
{
    for (int i = 0; i < ML_CONNS; i++)
        ml_fd_close(&conns[i].f);
}

static int peer_allowed(int c)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return 0;
    return cred.uid == 0 || cred.uid == geteuid();
}

/* Send the whole reply (small: it fits the socket buffer), waiting at most 2 s for room. */
static void send_reply(struct ml_fd *f, const char *reply, size_t len)
{
    int64_t deadline = ml_conns_now_ms() + CTL_REQUEST_MS;
    for (size_t off = 0; off < len;) {
        int c = ml_fd_get(f);
        if (c < 0)
            return;
        ssize_t n = send(c, reply + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        int64_t left = deadline - ml_conns_now_ms();
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || left <= 0)
            return;
        struct pollfd p = {.fd = c, .events = POLLOUT};
        poll(&p, 1, (int)left);
    }
}

/* Answer connection `k` (its line is in, it is too long, it hung up or its time is up) and close it.
 * A refused peer's request is read first all the same: closing with unread data would reset the
 * connection and lose the reply that tells them why. */
static void answer(struct conn *k, int complete)
{
    char reply[ML_CTL_LINE_MAX + 256];
    struct ml_buf r = {reply, 0, sizeof reply - 1};
    reply[0] = 0;
    int c = ml_fd_get(&k->f);
    if (c < 0)
        return; /* the program closed it: not ours to answer on */
    ml_ctl_reply(k->line, k->len, complete, k->too_long, peer_allowed(c), &r);
    reply[r.len++] = '\n';
    send_reply(&k->f, reply, r.len);
    ml_fd_close(&k->f);
}

void ml_conns_read(int tag)
{
    struct conn *k = &conns[tag];
    for (;;) {
        int c = ml_fd_get(&k->f);
        if (c < 0)
            return;
        char *at = k->line + k->len;
        size_t room = sizeof k->line - 1 - k->len;
        char scrap[256];
        /* A line that no longer fits is drained into scratch space until its end. */
        ssize_t n = k->too_long ? recv(c, scrap, sizeof scrap, MSG_DONTWAIT) : recv(c, at, room, MSG_DONTWAIT);
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

/* A new connection `c` (accepted just now): kept high, into a free slot, else in place of the one
 * nearest its deadline. */
static void conn_add(int c)
{
    struct conn *k = NULL;
    for (int i = 0; i < ML_CONNS && !k; i++)
        if (ml_fd_get(&conns[i].f) < 0)
            k = &conns[i];
    if (!k) {
        k = &conns[0];
        for (int i = 1; i < ML_CONNS; i++)
            if (conns[i].deadline < k->deadline)
                k = &conns[i];
        answer(k, 0);
    }
    if (ml_fd_adopt(&k->f, c) < 0)
        return;
    k->deadline = ml_conns_now_ms() + CTL_REQUEST_MS;
    k->len = 0;
    k->too_long = 0;
}

int ml_conns_accept(int listener)
{
    for (;;) {
        int c = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c >= 0) {
            conn_add(c);
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno == EBADF || errno == ENOTSOCK || errno == EINVAL || errno == EOPNOTSUPP)
            return -1;
        if (errno != ECONNABORTED && errno != EAGAIN && errno != EWOULDBLOCK) {
            /* Out of descriptors or memory: the pending connection stays readable, so pause
             * rather than spin. */
            struct timespec pause = {.tv_nsec = 100 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        return 0;
    }
}

void ml_conns_poll_set(int64_t now, struct pollfd *p, int *tag, int *n, int64_t *wake)
{
    for (int i = 0; i < ML_CONNS; i++) {
        int c = ml_fd_get(&conns[i].f);
        if (c < 0)
            continue;
        if (conns[i].deadline <= now) {
            answer(&conns[i], 0);
            continue;
        }
        if (conns[i].deadline < *wake)
            *wake = conns[i].deadline;
        tag[*n] = i;
        p[(*n)++] = (struct pollfd){.fd = c, .events = POLLIN};
    }
}
