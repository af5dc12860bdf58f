/* A program whose SIGALRM handler allocates, as crash reporters and SIGPROF samplers do (issue 29,
 * item 5): the main thread allocates and frees in a loop while an interval timer interrupts it
 * tens of thousands of times a second; the handler mallocs, reallocs and frees blocks of its own.
 * Under the runtime the signal lands inside sampled paths (a sampled free holding the range lock, a
 * sample being recorded); the handler must neither deadlock there nor re-enter them.
 *
 *   alarm_malloc [ITERATIONS]        (default 2000000); prints "handled N" and exits 0
 *
 * Safe without memlens too: the main loop and the handler use blocks of different sizes, so glibc
 * serves each from its own per-thread cache bin (warmed before the timer starts) and neither ever
 * waits for a lock the other holds. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static volatile sig_atomic_t handled;
static void *volatile keep; /* a block the handler keeps from one signal to the next */

static void on_alarm(int sig)
{
    (void)sig;
    char *p = malloc(600);
    if (p)
        memset(p, 1, 600);
    void *old = keep;
    keep = p;
    if ((handled & 3) == 0 && old) {
        char *q = realloc(old, 700); /* a sampled block reallocated inside the handler */
        if (q)
            q[699] = 2;
        old = q;
    }
    free(old);
    handled++;
}

int main(int argc, char **argv)
{
    long iterations = argc > 1 ? atol(argv[1]) : 2000000;
    /* warm both cache bins before the first signal */
    free(malloc(200));
    free(realloc(malloc(600), 700));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 20}, {0, 20}};
    setitimer(ITIMER_REAL, &it, NULL);
    unsigned long sum = 0;
    for (long i = 0; i < iterations; i++) {
        char *p = malloc(200);
        p[i % 200] = (char)i;
        sum += (unsigned char)p[i % 200];
        free(p);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    free(keep);
    printf("handled %ld sum %lu\n", (long)handled, sum);
    return 0;
}
