/* parca_target DIR [GROW [TITLE]]: leak_alloc() keeps 48 MiB in blocks of 1..16 KiB, then
 * DIR/leaked appears; churn_alloc() then allocates and frees about 20 MB/s, and leak_alloc() keeps
 * GROW more bytes per second (a leak). Every millisecond a line "REALTIME_NS ALLOCATED HELD"
 * (bytes the program asked malloc for, in all and still held) is appended to DIR/log. Until
 * DIR/stop. With TITLE the program rewrites its command line into TITLE, as redis does
 * (`redis-server *:6379`). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LEAK (48u << 20)
#define KEPT (1 << 16)
static char dir[4000];
static unsigned long long allocated, held;

static int exists(const char *name) {
    char p[4100]; snprintf(p, sizeof p, "%s/%s", dir, name); return access(p, F_OK) == 0;
}
static void touch(const char *name) {
    char p[4100]; snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_CREAT | O_WRONLY, 0644); if (fd >= 0) close(fd);
}
static long long now_ns(void) {
    struct timespec t; clock_gettime(CLOCK_REALTIME, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
__attribute__((noinline)) void *leak_alloc(size_t n) {
    void *p = malloc(n); /* leak line */
    memset(p, 1, n);
    allocated += n; held += n;
    return p;
}
__attribute__((noinline)) void churn_alloc(size_t n) {
    char *p = malloc(n); /* churn line */
    p[0] = 1; p[n - 1] = 2;
    __asm__ volatile("" : : "r"(p) : "memory"); /* a real malloc and free: not elided */
    allocated += n;
    free(p);
}
/* The command line becomes `title`, written over the arguments as setproctitle does. */
static void set_title(int argc, char **argv, const char *title) {
    char *end = argv[argc - 1] + strlen(argv[argc - 1]);
    size_t room = (size_t)(end - argv[0]);
    char t[256]; snprintf(t, sizeof t, "%s", title);
    memset(argv[0], 0, room);
    snprintf(argv[0], room, "%s", t);
}
int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "%s", argv[1]);
    double grow = argc > 2 ? atof(argv[2]) : 0;
    if (argc > 3) set_title(argc, argv, argv[3]);
    char p[4100]; snprintf(p, sizeof p, "%s/log", dir);
    int log = open(p, O_CREAT | O_WRONLY | O_APPEND, 0644);
    snprintf(p, sizeof p, "%s/pid.tmp", dir);
    FILE *f = fopen(p, "w"); fprintf(f, "%d\n", (int)getpid()); fclose(f);
    char q[4100]; snprintf(q, sizeof q, "%s/pid", dir); rename(p, q);
    /* The runtime's sampling of this thread starts after its first MiB or so (until then its
     * countdown is the budget it polls with before it is ready): warm up past it, so that the
     * leak is sampled whole and the program's count is what a profile can show. */
    for (int i = 0; i < 512; i++) free(malloc(4096));
    static void *kept[KEPT];
    unsigned n = 0;
    while (held < LEAK) kept[n] = leak_alloc(((n % 16) + 1) * 1024), n++;
    touch("leaked");
    long long t0 = now_ns();
    unsigned long long grown = 0;
    for (unsigned i = 0; !exists("stop"); i++) {
        for (int k = 0; k < 5; k++) churn_alloc(512 + ((i * 5 + k) % 16) * 480);
        long long t = now_ns();
        while (n < KEPT && grown < grow * (double)(t - t0) / 1e9) {
            size_t b = ((n % 16) + 1) * 1024;
            kept[n++] = leak_alloc(b);
            grown += b;
        }
        char line[100];
        int len = snprintf(line, sizeof line, "%lld %llu %llu\n", t, allocated, held);
        if (write(log, line, len) != len) return 1;
        usleep(1000);
    }
    return 0;
}
