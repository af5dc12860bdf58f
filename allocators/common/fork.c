/* fork() safety: hold every heap lock across fork so the child never inherits a heap that another
 * thread was in the middle of changing, then release them on both sides. A single-threaded process
 * takes none (ml_lock skips them), and releasing a lock that is not held is harmless. */
#include "ml_alloc.h"

#include <pthread.h>

static void prepare(void)
{
    for (unsigned i = 0; i < ML_MAX_HEAPS; i++)
        ml_lock(&ml_heaps[i].lock);
}

static void release(void)
{
    for (unsigned i = ML_MAX_HEAPS; i-- > 0;)
        ml_unlock(&ml_heaps[i].lock, 1);
}

__attribute__((constructor)) static void ml_fork_init(void)
{
    pthread_atfork(prepare, release, release);
}
