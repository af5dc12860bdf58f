/* global-lock: the study's singleton allocator. Every thread allocates from heap 0, so every malloc
 * and free in the process takes the same lock. */
#include "ml_alloc.h"

unsigned ml_pick_heap(void)
{
    return 0;
}
