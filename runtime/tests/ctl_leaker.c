/* A long-running program for the live-control tests (tests/e2e/ctl.rs): two threads allocate and free
 * steadily at steady_site(); the main thread leaks at leak_site() while told to.
 *
 *   ctl_leaker DIR          leak 256 KiB blocks (untouched) while DIR/leak exists
 *   ctl_leaker DIR growth   after 1 s, grow the resident set by ~100 MiB/s for 4 s (touched blocks)
 *
 * It writes its pid to DIR/pid once running and exits when DIR/stop appears (or after 120 s, so a
 * failed test never leaves it behind). It prints how many bytes it leaked. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char dir[3072];
static atomic_int quit;

static int exists(const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One steady allocation: the site that should not show up as growing. */
__attribute__((noinline)) static void *steady_site(size_t n)
{
    void *p = malloc(n);
    if (p)
        memset(p, 1, 16);
    return p;
}

/* Keep a ring of 64 live blocks and replace ~50 of them per millisecond. */
static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *ring[64] = {0};
    while (!atomic_load(&quit)) {
        for (int i = 0; i < 50; i++) {
            unsigned k = (unsigned)rand_r(&seed);
            free(ring[k % 64]);
            ring[k % 64] = steady_site(64 + (k >> 8) % 448);
        }
        usleep(1000);
    }
    for (int i = 0; i < 64; i++)
        free(ring[i]);
    return NULL;
}

/* The leaking site: blocks that are never freed. */
__attribute__((noinline)) static void *leak_site(size_t n, int touch)
{
    char *p = malloc(n);
    if (p && touch)
        memset(p, 7, n);
    return p;
}

static void write_pid(void)
{
    char p[4096], tmp[4096];
    snprintf(p, sizeof p, "%s/pid", dir);
    snprintf(tmp, sizeof tmp, "%s/pid.tmp", dir);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror("ctl_leaker: pid file");
        exit(1);
    }
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    rename(tmp, p); /* atomically: the test never reads a half-written pid */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: ctl_leaker DIR [growth]\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    int growth = argc > 2 && strcmp(argv[2], "growth") == 0;
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    write_pid();
    double t0 = now();
    size_t leaked = 0;
    while (!exists("stop") && now() - t0 < 120) {
        double t = now() - t0;
        if (growth && t > 1.0 && t < 5.0) {
            for (int i = 0; i < 2; i++) /* 2 MiB per 20 ms: ~100 MiB/s */
                leaked += leak_site(1 << 20, 1) ? 1 << 20 : 0;
            usleep(20000);
        } else if (!growth && exists("leak")) {
            leaked += leak_site(256 << 10, 0) ? 256 << 10 : 0;
            usleep(1000);
        } else {
            usleep(10000);
        }
    }
    atomic_store(&quit, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("leaked %zu bytes\n", leaked);
    return 0;
}
