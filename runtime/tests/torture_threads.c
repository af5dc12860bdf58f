/* Torture: 32 threads created and joined, over and over, each allocating (and some keeping blocks
 * that another thread frees). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 32

static void *kept[NTHREADS];

static __attribute__((noinline)) void *worker(void *arg)
{
    long id = (long)arg;
    unsigned long sum = 0;
    for (int i = 0; i < 400; i++) {
        size_t n = 512 + (size_t)((i * 7 + id) % 50) * 1024;
        char *p = (i & 1) ? malloc(n) : calloc(1, n);
        p[0] = (char)i;
        sum += (unsigned char)p[0];
        p = realloc(p, n * 2);
        free(p);
    }
    kept[id] = malloc(64 << 10); /* freed by the main thread */
    return (void *)sum;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    unsigned long total = 0;
    for (int r = 0; r < rounds; r++) {
        pthread_t t[NTHREADS];
        for (long i = 0; i < NTHREADS; i++)
            if (pthread_create(&t[i], NULL, worker, (void *)i) != 0)
                return 1;
        for (int i = 0; i < NTHREADS; i++) {
            void *ret;
            pthread_join(t[i], &ret);
            total += (unsigned long)ret;
            free(kept[i]);
        }
    }
    printf("rounds %d total %lu\n", rounds, total);
    return 0;
}
