/* pooled: the study's pooled variant, an array of global-lock heaps chosen by thread. The n-th thread
 * that allocates gets heap n mod ML_MAX_HEAPS (remembered in initial-exec TLS, so choosing costs one
 * %fs-relative load), which gives distinct threads distinct locks until there are more threads than
 * heaps. A block freed by another thread still goes back to the heap that carved it. */
#include "ml_alloc.h"

static __thread int my_heap = -1;
static unsigned next_heap;

unsigned ml_pick_heap(void)
{
    if (__builtin_expect(my_heap < 0, 0))
        my_heap = (int)(__atomic_fetch_add(&next_heap, 1, __ATOMIC_RELAXED) % ML_MAX_HEAPS);
    return (unsigned)my_heap;
}
