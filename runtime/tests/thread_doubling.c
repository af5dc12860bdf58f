/* The ripgrep realloc site of issue 34 as a stand-in: a line buffer calloc'd at 64 KiB on a worker
 * thread and grown by doubling realloc to 4 MiB, handed half-way to a second worker thread that goes
 * on growing it (ripgrep's buffer moved between its two threads), while both threads churn blocks of
 * 4-16 KiB so that the buffer moves within the runtime's range rather than growing in place. The
 * churn keeps at most 16 of them (256 KiB): its sampling noise never lifts the highest estimate, where
 * the peak set is taken, to a moment before the buffer's last doubling. The
 * site's peak is the buffer's last size, printed as `buffer_bytes N`; memlens once read about twice
 * that for ripgrep (issue 34), which the test that runs this guards against. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *buf;
static size_t len;

static void churn(unsigned seed)
{
    void *keep[16] = {0};
    for (unsigned i = 0; i < 4000; i++) {
        unsigned k = (seed + i * 2654435761u) % 16;
        free(keep[k]);
        keep[k] = malloc(4096 + ((seed + i) % 4) * 4096);
        if (keep[k])
            memset(keep[k], 1, 64);
    }
    for (int k = 0; k < 16; k++)
        free(keep[k]);
}

__attribute__((noinline)) static int grow_buffer(size_t to)
{
    char *p = realloc(buf, to);
    if (!p)
        return -1;
    memset(p + len, 0, to - len); /* Vec::resize(new_len, 0) */
    buf = p;
    len = to;
    return 0;
}

static void *worker(void *arg)
{
    size_t until = (size_t)arg;
    if (!buf) {
        buf = calloc(1, 64 << 10);
        len = 64 << 10;
    }
    while (buf && len < until) {
        churn((unsigned)len);
        if (grow_buffer(len * 2))
            return NULL;
    }
    churn(7);
    return NULL;
}

int main(void)
{
    pthread_t a, b;
    if (pthread_create(&a, NULL, worker, (void *)(size_t)(512 << 10)) || pthread_join(a, NULL))
        return 1;
    if (pthread_create(&b, NULL, worker, (void *)(size_t)(4 << 20)) || pthread_join(b, NULL))
        return 1;
    if (!buf)
        return 1;
    printf("buffer_bytes %zu\n", len);
    free(buf);
    return 0;
}
