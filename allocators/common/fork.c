/* fork() safety: hold every heap lock across fork so the child never inherits a heap that another
 * thread was in the middle of changing, then release them on both sides. */
#include "ml_alloc.h"

static void prepare(void)
{
    for (unsigned i = 0; i < ML_MAX_HEAPS; i++)
        pthread_mutex_lock(&ml_heaps[i].lock);
}

static void release(void)
{
    for (unsigned i = ML_MAX_HEAPS; i-- > 0;)
        pthread_mutex_unlock(&ml_heaps[i].lock);
}

__attribute__((constructor)) static void ml_fork_init(void)
{
    pthread_atfork(prepare, release, release);
}
