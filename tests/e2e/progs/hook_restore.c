/* A program with jemalloc linked in (libjemalloc_pic.a: malloc and free are defined in it), for
 * tests/e2e/allocators_attach.rs: memlens attaches, hooks those entry points, detaches and puts
 * their bytes back, while this program keeps allocating and checks every block it made.
 *   hook_restore DIR
 * Prints `entries MALLOC FREE` (their addresses) and `ready`, waits for DIR/churn, then churns: rounds of blocks of
 * 16 B..64 KiB filled with a pattern, checked and freed, with HELD blocks kept across rounds. When
 * DIR/quiet exists it frees what it holds, prints `quiet` and allocates nothing until DIR/go
 * exists; when DIR/end exists it prints `done ROUNDS bad=N` and exits (1 if a block was wrong). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HELD 256
#define PER_ROUND 64

static char path[4][4096];
static void *held[HELD];
static size_t held_n[HELD];
static unsigned long bad;

static int exists(int i) { return access(path[i], F_OK) == 0; }

static size_t size_of(unsigned long r, int i) { return 16u << ((r * 7 + (unsigned)i * 3) % 13); }

/* Fill a block with a pattern from its size, and check it later (a moved block keeps it). */
static unsigned char pattern(size_t n) { return (unsigned char)((n * 31 + 7) & 0xff); }
static void fill(void *p, size_t n) { memset(p, pattern(n), n); }
static void check_as(const void *p, size_t n, unsigned char want)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i += 61)
        if (c[i] != want)
            bad++;
    if (n && c[n - 1] != want)
        bad++;
}
static void check(const void *p, size_t n) { check_as(p, n, pattern(n)); }

static void round_once(unsigned long r)
{
    void *p[PER_ROUND];
    for (int i = 0; i < PER_ROUND; i++) {
        size_t n = size_of(r, i);
        p[i] = i % 8 == 7 ? calloc(1, n) : malloc(n);
        if (!p[i]) {
            bad++;
            continue;
        }
        if (i % 8 == 7)
            check_as(p[i], n, 0); /* calloc: zeroed */
        fill(p[i], n);
    }
    for (int i = 0; i < PER_ROUND; i++)
        if (p[i]) {
            size_t n = size_of(r, i);
            check(p[i], n);
            if (i % 16 == 5) { /* realloc: the bytes kept must survive */
                void *q = realloc(p[i], n * 2);
                if (!q) {
                    free(p[i]);
                    bad++;
                    continue;
                }
                check_as(q, n, pattern(n));
                p[i] = q;
            }
            free(p[i]);
        }
    int k = (int)(r % HELD); /* replace one held block */
    if (held[k]) {
        check(held[k], held_n[k]);
        free(held[k]);
    }
    held_n[k] = size_of(r, 1) * 4;
    held[k] = malloc(held_n[k]);
    if (held[k])
        fill(held[k], held_n[k]);
}

static void release_all(void)
{
    for (int k = 0; k < HELD; k++)
        if (held[k]) {
            check(held[k], held_n[k]);
            free(held[k]);
            held[k] = NULL;
        }
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    snprintf(path[0], sizeof path[0], "%s/quiet", argv[1]);
    snprintf(path[1], sizeof path[1], "%s/go", argv[1]);
    snprintf(path[2], sizeof path[2], "%s/end", argv[1]);
    snprintf(path[3], sizeof path[3], "%s/churn", argv[1]);
    printf("entries %p %p\nready\n", (void *)malloc, (void *)free);
    fflush(stdout);
    unsigned long r = 0;
    struct timespec nap = {0, 2000000};
    while (!exists(3)) /* memlens attaches meanwhile: outside the allocator (see the test) */
        nanosleep(&nap, NULL);
    while (!exists(2)) {
        if (exists(0) && !exists(1)) {
            release_all();
            printf("quiet\n");
            fflush(stdout);
            while (!exists(1))
                nanosleep(&nap, NULL);
        }
        round_once(r++);
        if (r % 64 == 0)
            nanosleep(&nap, NULL); /* leave the machine to the others now and then */
    }
    release_all();
    printf("done %lu bad=%lu\n", r, bad);
    return bad != 0;
}
