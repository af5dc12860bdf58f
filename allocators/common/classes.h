/* Size classes: 16-byte steps up to 128 B, then four classes per power of two (at most 25% waste),
 * up to ML_MAX_CLASS_TOTAL. Sizes here include the block header. */
#ifndef ML_CLASSES_H
#define ML_CLASSES_H

#include <stddef.h>

/* Inline: both run on every malloc, and a call into another file costs as much as the arithmetic. */
static inline unsigned ml_class_of(size_t total)
{
    if (total <= 128)
        return (unsigned)((total - 1) >> 4);
    /* 2^b < total <= 2^(b+1); the two bits below the top one pick the quarter. */
    unsigned b = 63u - (unsigned)__builtin_clzll((unsigned long long)(total - 1));
    unsigned quarter = (unsigned)((total - 1) >> (b - 2)) & 3u;
    return 8u + (b - 7u) * 4u + quarter;
}

static inline size_t ml_class_size(unsigned cls)
{
    if (cls < 8)
        return ((size_t)cls + 1) << 4;
    unsigned b = 7u + (cls - 8u) / 4u;
    unsigned quarter = (cls - 8u) % 4u;
    return ((size_t)5 + quarter) << (b - 2);
}

#endif
