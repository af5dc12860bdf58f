/* A small request server built with musl-gcc (tests/e2e/musl.rs): a client thread sends requests
 * over a socketpair, the server answers each from a buffer allocated in handle_request and keeps
 * it (a cache), so the site holds a known number of bytes at exit. It prints its C library, pid,
 * own count and the site's line, which the test compares with `memlens report`. With arguments,
 * it then runs them as a child (fork and exec) and waits: built once with musl-gcc and once with
 * gcc, the two make an exec chain across C libraries in either order. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define REQUESTS 2000
#define REQ_SIZE 16384

static char *cache[REQUESTS];
static size_t cached_bytes;
static int site_line;

static void *client(void *arg)
{
    int fd = *(int *)arg;
    char req[32], ack;
    for (int i = 0; i < REQUESTS; i++) {
        int n = snprintf(req, sizeof req, "GET %d\n", REQ_SIZE);
        if (write(fd, req, (size_t)n) != n || read(fd, &ack, 1) != 1)
            break;
    }
    close(fd);
    return NULL;
}

__attribute__((noinline)) static char *handle_request(size_t size)
{
    site_line = __LINE__ + 1;
    char *buf = malloc(size);
    if (buf)
        memset(buf, 'x', size);
    return buf;
}

#ifdef __GLIBC__
#define LIBC "glibc"
#else
#define LIBC "musl"
#endif

/* argv[1..] as a child; 0 when it exits 0. */
static int run_child(char **argv)
{
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    if (p < 0 || waitpid(p, &st, 0) != p)
        return 1;
    return !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}

int main(int argc, char **argv)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 1;
    pthread_t t;
    if (pthread_create(&t, NULL, client, &sv[1]) != 0)
        return 1;
    FILE *in = fdopen(sv[0], "r");
    char line[64];
    int served = 0;
    while (served < REQUESTS && fgets(line, sizeof line, in)) {
        size_t size = strtoul(line + 4, NULL, 10);
        if (!(cache[served] = handle_request(size)))
            return 1;
        cached_bytes += size;
        served++;
        if (write(sv[0], "k", 1) != 1)
            break;
    }
    pthread_join(t, NULL);
    printf("%s pid %d served %d site_line %d bytes %zu\n", LIBC, (int)getpid(), served, site_line,
           cached_bytes);
    if (served != REQUESTS)
        return 1;
    return argc > 1 ? run_child(argv + 1) : 0;
}
