/* A busy program for the attach stress test (tests/e2e/attach.rs): every thread, main included, is
 * inside malloc/free/realloc most of the time, and one more thread dlopens and dlcloses LIB in a
 * loop, so an attach finds threads in the allocator and in the dynamic loader. Blocks carry a
 * pattern that is checked before every free; prints "ok" and exits 0 after SECONDS.
 *   attach_busy LIB SECONDS */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOTS 512

static double seconds;
static const char *lib_path;
static volatile int stop;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void check(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i += 61)
        if (p[i] != v) {
            printf("corrupted block\n");
            fflush(stdout);
            abort();
        }
}

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
    unsigned char *slot[SLOTS] = {0};
    size_t size[SLOTS];
    while (!stop) {
        for (int k = 0; k < 1000; k++) {
            seed = seed * 1103515245u + 12345u;
            int s = (int)((seed >> 8) % SLOTS);
            if (slot[s]) {
                check(slot[s], size[s], (unsigned char)s);
                if (seed & 0x10000) {
                    size_t n = size[s] * 2 + 8;
                    unsigned char *q = realloc(slot[s], n);
                    check(q, size[s], (unsigned char)s);
                    memset(q, s & 0xff, n);
                    slot[s] = q;
                    size[s] = n;
                    continue;
                }
                free(slot[s]);
                slot[s] = NULL;
            } else {
                size[s] = 16 + (seed >> 12) % 4000;
                slot[s] = (seed & 0x20000) ? calloc(1, size[s]) : malloc(size[s]);
                memset(slot[s], s & 0xff, size[s]);
            }
        }
    }
    for (int s = 0; s < SLOTS; s++)
        free(slot[s]);
    return NULL;
}

static void *loader(void *arg)
{
    (void)arg;
    while (!stop) {
        void *h = dlopen(lib_path, RTLD_NOW);
        if (!h) {
            printf("dlopen: %s\n", dlerror());
            abort();
        }
        unsigned long (*work)(unsigned) = (unsigned long (*)(unsigned))dlsym(h, "late_alloc_work");
        work(1);
        dlclose(h);
    }
    return NULL;
}

static void *timer(void *arg)
{
    (void)arg;
    double end = now() + seconds;
    while (now() < end) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    stop = 1;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: attach_busy LIB SECONDS\n");
        return 2;
    }
    lib_path = argv[1];
    seconds = atof(argv[2]);
    pthread_t t[4];
    pthread_create(&t[0], NULL, churn, (void *)1);
    pthread_create(&t[1], NULL, churn, (void *)2);
    pthread_create(&t[2], NULL, loader, NULL);
    pthread_create(&t[3], NULL, timer, NULL);
    printf("ready\n");
    fflush(stdout);
    churn((void *)3);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    printf("ok\n");
    return 0;
}
