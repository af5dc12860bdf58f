/* The library lying_modules.c allocates through: its frame is in every stack it allocates from
 * (not inlined, not a tail call). */
#include <stdlib.h>

__attribute__((noinline)) void *lie_alloc(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}
