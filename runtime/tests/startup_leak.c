/* A leak made at start-up, the most common kind: 8 MiB in 1 MiB blocks allocated first thing in main
 * (so right after sampling starts, all within a fraction of a millisecond: only their first bytes are
 * written) and never freed, then about a second of other work that allocates and frees. The leaks
 * view must give the leak its age (about the whole run) and mark it suspect.
 *   startup_leak [MS]   (default 1000 ms of work) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static void *leaked[8];

static __attribute__((noinline)) void startup_leak_site(void)
{
    for (int i = 0; i < 8; i++) {
        leaked[i] = malloc(1 << 20);
        memset(leaked[i], 1, 64);
    }
}

static __attribute__((noinline)) void work_site(void)
{
    char *p = malloc(4096);
    p[0] = 1;
    KEEP(p);
    free(p);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    startup_leak_site();
    double ms = argc > 1 ? atof(argv[1]) : 1000, t0 = now();
    long n = 0;
    while ((now() - t0) * 1e3 < ms) {
        for (int i = 0; i < 1000; i++)
            work_site();
        n++;
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
    }
    printf("leaked %d bytes, %ld rounds of work\n", 8 << 20, n);
    return 0;
}
