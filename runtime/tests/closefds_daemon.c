/* A daemon that closes every descriptor it did not open and then serves TCP (issue 29, item 2), as
 * classic daemons do on start-up: close_range(0, ~0), stdin and stdout reopened on /dev/null, stderr
 * on its own log file, a pid file and its configuration files kept open (OPEN_FILES of them, 4 by
 * default), then a TCP listener, which gets the lowest free number: under memlens 0.x that was the
 * number of the profiler's control socket (fd 7). It serves CLIENTS connections (a line in, "pong N" out), allocating
 * as it goes, writes "served N" to its log and exits 0.
 *
 *   closefds_daemon PORT_FILE LOG_FILE CLIENTS [OPEN_FILES]
 * PORT_FILE receives the port once the daemon listens (written to a temporary name and renamed). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static void close_everything(const char *log)
{
    if (syscall(SYS_close_range, 0, ~0u, 0) != 0)
        for (int fd = 0; fd < 65536; fd++)
            close(fd);
    open("/dev/null", O_RDONLY);                            /* 0 */
    open("/dev/null", O_WRONLY);                            /* 1 */
    open(log, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644); /* 2: the daemon's own log */
}

static void publish_port(const char *path, int port)
{
    char tmp[4096], text[32];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int n = snprintf(text, sizeof text, "%d\n", port);
    if (fd < 0 || write(fd, text, (size_t)n) != n || close(fd) != 0 || rename(tmp, path) != 0)
        exit(3);
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    int clients = atoi(argv[3]), files = argc > 4 ? atoi(argv[4]) : 4;
    close_everything(argv[2]);
    for (int i = 0; i < files; i++)
        open("/dev/null", O_RDONLY); /* its pid file and configuration, kept open */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 64) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) != 0)
        return 4;
    dprintf(2, "daemon: listening on fd %d\n", s);
    publish_port(argv[1], ntohs(a.sin_port));
    int served = 0;
    for (int i = 0; i < clients; i++) {
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        char line[256];
        ssize_t n = read(c, line, sizeof line);
        char *work = malloc(64 * 1024 + (size_t)i * 4096); /* a request's worth of allocations */
        memset(work, i, 4096);
        char reply[64];
        int k = snprintf(reply, sizeof reply, "pong %d\n", i);
        if (n > 0 && write(c, reply, (size_t)k) == k)
            served++;
        free(work);
        close(c);
    }
    dprintf(2, "daemon: served %d\n", served);
    return served == clients ? 0 : 1;
}
