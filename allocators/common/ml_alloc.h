/* Shared internals of the memlens reference allocators (global-lock, pooled).
 *
 * Design, kept deliberately simple so the comparison with production allocators is about the one thing
 * the study varies (one lock vs. a lock per thread-chosen heap):
 *   - every block starts with a 16-byte header naming its owning heap and size class, so free() needs
 *     no lookup and a block freed by another thread goes back to the heap that carved it;
 *   - a heap is segregated free lists (4 classes per power of two, 32 B .. 8 MiB) filled by bumping
 *     through 4 MiB mmap'd chunks, the whole heap behind one lock (lock.h);
 *   - blocks above 8 MiB are mmap'd on their own and munmap'd on free (no heap, no lock);
 *   - alignments above 16 over-allocate and put a second "offset" header in front of the aligned
 *     pointer that leads free() back to the real block.
 * Each allocator provides ml_pick_heap(): which heap the calling thread allocates from. */
#ifndef ML_ALLOC_H
#define ML_ALLOC_H

#include "lock.h"

#include <stddef.h>
#include <stdint.h>

#define ML_HIDDEN __attribute__((visibility("hidden")))

#define ML_HDR 16u                      /* header size, also the minimum alignment */
#define ML_MIN_BLOCK 32u                /* header + room for the free-list link */
#define ML_NCLASSES 72u                 /* 32 B .. 8 MiB, see ml_class_of() */
#define ML_MAX_CLASS_TOTAL (8u << 20)   /* larger blocks are mmap'd on their own */
#define ML_CHUNK (4u << 20)             /* bump region for classes up to ML_CHUNK / 16 */
#define ML_MAX_HEAPS 32u

#define ML_CLS_LARGE 0xffffu
#define ML_CLS_ALIGNED 0xfffeu
#define ML_MAGIC_LIVE 0x6d6c4c56u
#define ML_MAGIC_FREE 0x6d6c4652u

/* In front of every pointer handed out. For small blocks `size` is the class's block size (header
 * included), for large ones the mapping length, for aligned ones the distance back to the real block. */
struct ml_hdr {
    uint32_t magic;
    uint16_t heap;
    uint16_t cls;
    uint64_t size;
};

struct ml_free {
    struct ml_free *next;
};

struct ml_heap {
    ml_lock_t lock;
    struct ml_free *free[ML_NCLASSES];
    char *bump;
    char *bump_end;
} __attribute__((aligned(64))); /* no false sharing between heaps' locks */

extern struct ml_heap ml_heaps[ML_MAX_HEAPS] ML_HIDDEN;

/* Provided by each allocator: index of the heap the calling thread allocates from. */
ML_HIDDEN unsigned ml_pick_heap(void);

/* Size classes: ml_class_of(total) and ml_class_size(cls), inline in classes.h. */
#include "classes.h"

/* Heap operations (heap.c): a block of class `cls` from heap `h`, and its return. */
ML_HIDDEN void *ml_heap_alloc(unsigned h, unsigned cls);
ML_HIDDEN void ml_heap_free(struct ml_hdr *hd);

/* Blocks that bypass the heaps (large.c). */
ML_HIDDEN void *ml_large_alloc(size_t n);
ML_HIDDEN void ml_large_free(struct ml_hdr *hd);
ML_HIDDEN void *ml_large_resize(void *p, size_t n);

/* Core entry points the public malloc family is built on (core.c). */
ML_HIDDEN void *ml_alloc(size_t n);
ML_HIDDEN void *ml_alloc_aligned(size_t align, size_t n);
ML_HIDDEN void ml_release(void *p);
ML_HIDDEN size_t ml_usable(const void *p);
ML_HIDDEN int ml_is_fresh_mapping(const void *p);
ML_HIDDEN struct ml_hdr *ml_hdr_of(const void *p);

/* Report heap corruption or an invalid free and abort: continuing would corrupt the program. */
ML_HIDDEN __attribute__((noreturn)) void ml_fatal(const char *msg);

#endif
