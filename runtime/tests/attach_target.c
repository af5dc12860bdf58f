/* A program memlens attaches to while it runs (tests/e2e/attach.rs). Three threads, paced so the run
 * lasts about four seconds and the output does not depend on timing:
 *   - "site": allocates from attach_site_alloc() (the stack the profile must name), keeps some
 *     blocks for a while, frees them;
 *   - "old": frees and reallocs blocks main allocated before any attach, checking their contents;
 *   - "late": after 1.8 s dlopens LIB (attach_late.c) and calls its allocating function.
 * Prints checksums and exits with status 3; the same with or without an attach in the middle.
 *   attach_target LIB [SECONDS=4] */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OLD 3000
#define ROUNDS 200

static unsigned char *old[OLD];
static size_t old_size[OLD];
static double pace_s = 0.02; /* per round */
static const char *lib_path;

static void pause_round(void)
{
    struct timespec ts = {0, (long)(pace_s * 1e9)};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) void *attach_site_alloc(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::"r"(p) : "memory");
    return p;
}

static void *site(void *arg)
{
    unsigned long sum = 0;
    unsigned char *keep[32] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < 200; i++) {
            size_t n = 1000 + (size_t)((r * 200 + i) % 13) * 100;
            unsigned char *p = attach_site_alloc(n);
            memset(p, (r + i) & 0xff, n);
            sum += p[n / 2] + n;
            int k = (r * 7 + i) % 32;
            if (keep[k])
                sum += keep[k][0];
            free(keep[k]);
            keep[k] = p;
        }
        pause_round();
    }
    for (int k = 0; k < 32; k++)
        free(keep[k]);
    *(unsigned long *)arg = sum;
    return NULL;
}

static void *olds(void *arg)
{
    unsigned long sum = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = r * OLD / ROUNDS; i < (r + 1) * OLD / ROUNDS; i++) {
            for (size_t j = 0; j < old_size[i]; j++)
                if (old[i][j] != (unsigned char)(i + j)) {
                    printf("old block %d corrupted\n", i);
                    exit(1);
                }
            if (i % 2) {
                size_t n = old_size[i] * 3;
                unsigned char *q = realloc(old[i], n);
                for (size_t j = 0; j < old_size[i]; j++)
                    sum += q[j] == (unsigned char)(i + j);
                free(q);
            } else {
                sum += malloc_usable_size(old[i]) >= old_size[i];
                free(old[i]);
            }
        }
        pause_round();
    }
    *(unsigned long *)arg = sum;
    return NULL;
}

static void *late(void *arg)
{
    struct timespec ts = {1, 800000000};
    nanosleep(&ts, NULL);
    void *h = dlopen(lib_path, RTLD_NOW);
    if (!h) {
        printf("dlopen: %s\n", dlerror());
        exit(1);
    }
    unsigned long (*work)(unsigned) = (unsigned long (*)(unsigned))dlsym(h, "late_alloc_work");
    unsigned long sum = 0;
    for (unsigned r = 0; r < ROUNDS / 2; r++) {
        sum += work(r);
        pause_round();
    }
    *(unsigned long *)arg = sum;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: attach_target LIB [SECONDS]\n");
        return 2;
    }
    lib_path = argv[1];
    if (argc > 2)
        pace_s = atof(argv[2]) / ROUNDS;
    for (int i = 0; i < OLD; i++) {
        old_size[i] = 16 + (size_t)(i % 50) * 40;
        old[i] = malloc(old_size[i]);
        for (size_t j = 0; j < old_size[i]; j++)
            old[i][j] = (unsigned char)(i + j);
    }
    printf("ready\n");
    fflush(stdout);
    unsigned long s1 = 0, s2 = 0, s3 = 0;
    pthread_t t1, t2, t3;
    pthread_create(&t1, NULL, site, &s1);
    pthread_create(&t2, NULL, olds, &s2);
    pthread_create(&t3, NULL, late, &s3);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_join(t3, NULL);
    printf("site=%lu old=%lu late=%lu\n", s1, s2, s3);
    return 3;
}
