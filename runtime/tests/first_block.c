/* A thread whose first allocation is big and never freed: the sampler must be able to take the very
 * allocation that arms a thread's countdown (a 64 MiB block is sampled with probability ~1 at any
 * interval up to a few MiB), or the leak view would miss it entirely. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void *kept;

__attribute__((noinline)) void *first_block_site(void *arg)
{
    (void)arg;
    kept = malloc(64 << 20);
    memset(kept, 1, 4096);
    return NULL;
}

int main(void)
{
    pthread_t t;
    pthread_create(&t, NULL, first_block_site, NULL);
    pthread_join(t, NULL);
    return kept ? 0 : 1;
}
