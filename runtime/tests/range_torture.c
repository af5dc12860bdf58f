/* Random malloc / calloc / realloc / aligned / free of sizes from 1 B to 4 MiB on 4 threads, every
 * block filled with a pattern of its own and checked before it is resized or freed: with a small
 * sampling interval most blocks live in the runtime's range, so its classes, page runs, in-place
 * resizing and reuse are all exercised. `range_torture [STEPS]` (per thread, default 40000). Prints
 * "ok" or the first corruption found. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 512
static int steps = 40000;

struct slot {
    unsigned char *p;
    size_t n;
    unsigned char tag;
};

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t pick(uint64_t *s)
{
    switch (next(s) % 8) {
    case 0: return next(s) % 64 + 1;
    case 1: case 2: return next(s) % 4096 + 1;
    case 3: case 4: return next(s) % 65536 + 1;
    case 5: return next(s) % (1 << 20) + 1;
    default: return next(s) % (4 << 20) + 1;
    }
}

static int check(const struct slot *s)
{
    size_t step = s->n > 4096 ? 4093 : 1; /* big blocks: a sample of their bytes */
    for (size_t i = 0; i < s->n; i += step)
        if (s->p[i] != (unsigned char)(s->tag + i))
            return 0;
    return s->p[s->n - 1] == (unsigned char)(s->tag + s->n - 1);
}

static void fill(struct slot *s, size_t from)
{
    for (size_t i = from; i < s->n; i++)
        s->p[i] = (unsigned char)(s->tag + i);
}

static void *worker(void *arg)
{
    uint64_t seed = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    struct slot *slots = calloc(SLOTS, sizeof *slots);
    for (int step = 0; step < steps; step++) {
        struct slot *s = &slots[next(&seed) % SLOTS];
        if (s->p && !check(s)) {
            printf("corrupt block of %zu bytes\n", s->n);
            exit(1);
        }
        unsigned op = next(&seed) % 6;
        if (s->p && op < 2) {
            free(s->p);
            s->p = NULL;
        } else if (s->p && op < 4) {
            size_t n = pick(&seed), old = s->n;
            unsigned char *q = realloc(s->p, n);
            if (!q)
                continue;
            s->p = q;
            s->n = n;
            fill(s, old < n ? old : n);
        } else if (!s->p) {
            s->n = pick(&seed);
            s->tag = (unsigned char)next(&seed);
            if (op == 4) {
                s->p = calloc(1, s->n);
                for (size_t i = 0; s->p && i < s->n; i += 509)
                    if (s->p[i]) {
                        printf("calloc returned dirty memory\n");
                        exit(1);
                    }
            } else if (op == 5) {
                void *q = NULL;
                s->p = posix_memalign(&q, (size_t)64 << (next(&seed) % 7), s->n) ? NULL : q;
            } else {
                s->p = malloc(s->n);
            }
            if (s->p)
                fill(s, 0);
        }
    }
    for (int i = 0; i < SLOTS; i++)
        free(slots[i].p);
    free(slots);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        steps = atoi(argv[1]);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    printf("ok\n");
    return 0;
}
