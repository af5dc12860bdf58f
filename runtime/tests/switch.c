/* The fast switch: a start, stop or interval change reaches every thread at its next allocation.
 *
 *   switch THREADS SWITCHES
 *
 * Run under `memlens run --inactive`. THREADS threads allocate 64-byte blocks slowly (a pause of a few
 * microseconds between allocations: with the old 1 MiB poll budget a switch would take 16384 of their
 * allocations to arrive). The main thread switches sampling on at interval 1 (every allocation is
 * sampled once the thread has re-armed) and off again, SWITCHES times, while short-lived threads are
 * created and exit (the switch must never write into a thread that is gone). After each switch every
 * worker counts its allocations until the switch shows (on: its sample count rises; off: it stops
 * rising). Prints `max_allocs_to_on N`, `max_allocs_to_off N`, `switch_ns_max N`, `pending_max N`. */
#define MEMLENS_WEAK
#include <memlens.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

static _Atomic int phase;        /* even: off, odd: on; bumped after each switch returned */
static _Atomic int stop;
static _Atomic long acked[1024]; /* phase each worker has seen take effect */
static long worst_on, worst_off;
static pthread_mutex_t worst_lock = PTHREAD_MUTEX_INITIALIZER;

static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static void pause_us(int us)
{
    uint64_t t0 = __rdtsc();
    while (__rdtsc() - t0 < (uint64_t)us * 2000)
        __builtin_ia32_pause();
}

static void *worker(void *arg)
{
    long id = (long)arg, seen = 0, allocs = 0;
    while (!atomic_load(&stop)) {
        int ph = atomic_load(&phase);
        if (ph != seen) { /* a new switch returned: count allocations until it shows */
            seen = ph;
            allocs = 0;
        }
        uint64_t before = memlens_thread_samples();
        void *p = malloc(64);
        keep(p);
        free(p);
        allocs++;
        int sampled = memlens_thread_samples() != before;
        if (atomic_load(&acked[id]) != seen && (seen & 1) == sampled) {
            pthread_mutex_lock(&worst_lock);
            long *w = (seen & 1) ? &worst_on : &worst_off;
            if (allocs > *w)
                *w = allocs;
            pthread_mutex_unlock(&worst_lock);
            atomic_store(&acked[id], seen);
        }
        pause_us(5);
    }
    return NULL;
}

static void *short_lived(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++)
        free(malloc(32));
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4, switches = argc > 2 ? atoi(argv[2]) : 100;
    if (!memlens_start || n < 1 || n > 1024) {
        printf("runtime: absent\n");
        return 0;
    }
    pthread_t *t = calloc((size_t)n, sizeof *t);
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    pause_us(20000);
    memlens_set_interval(1);
    uint64_t ns_max = 0, pending_max = 0;
    for (int s = 0; s < switches; s++) {
        pthread_t tmp;
        pthread_create(&tmp, NULL, short_lived, NULL);
        if (s % 2 == 0)
            memlens_start();
        else
            memlens_stop();
        struct memlens_switch sw;
        memlens_last_switch(&sw);
        ns_max = sw.ns > ns_max ? sw.ns : ns_max;
        pending_max = sw.pending > pending_max ? sw.pending : pending_max;
        int ph = atomic_fetch_add(&phase, 1) + 1;
        for (long i = 0; i < n; i++) /* wait until every worker has seen this switch take effect */
            while (atomic_load(&acked[i]) != ph)
                pause_us(10);
        pthread_join(tmp, NULL);
    }
    memlens_stop();
    atomic_store(&stop, 1);
    for (long i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("max_allocs_to_on %ld\nmax_allocs_to_off %ld\nswitch_ns_max %llu\npending_max %llu\n", worst_on,
           worst_off, (unsigned long long)ns_max, (unsigned long long)pending_max);
    return 0;
}
