/* Every event of a sampled block, and every figure it feeds (block.c explains). */
#ifndef MEMLENS_BLOCK_H
#define MEMLENS_BLOCK_H
#include "../base/rt.h"
#include "range.h"

#pragma GCC visibility push(hidden)

/* A sampled block of `size` bytes on stack `id` with weights (w_fx, w_bytes), from call site ra, with
 * room for `room` >= size bytes (its usable size: ml_block_usable). `weigh`: the bytes it stands for
 * in the peak's half-samples — its size, except for a shadow (one byte standing for an mmap'd or
 * reported block of `weigh` bytes, whose weights were drawn at that size). `tsc`: a TSC stamp the
 * caller just took (its own account's), the block's birth; 0 to take one here. */
void *ml_block_new(size_t size, size_t room, size_t weigh, size_t align, int zero, uint32_t id,
                   uint64_t w_fx, uint64_t w_bytes, uintptr_t ra, uint64_t tsc);
/* What malloc_usable_size says of a block of the range: the usable size the block's allocator would
 * give for its size (its size class), not the size asked. A program that grows a block into the
 * slack malloc_usable_size reports (redis's listpacks and strings) must see the same slack in a
 * sampled block as in an unsampled one: told the exact size, it reallocated a sampled block at every
 * step and an unsampled one only at the allocator's classes, and the block's own draw at its first
 * reallocation in the range (block.c) then found it a second time, so the live estimate lost the
 * blocks that entered the range at their last class (an eighth of them at 512K). */
static inline size_t ml_block_usable(const struct ml_block *b)
{
    return b->kind == ML_KIND_SAMPLED && b->usable > b->size ? b->usable : b->size;
}
void ml_sampled_free(void *p);
/* Placeholders (source.c explains why): a sampled block of the range may own a chunk of the real
 * allocator, asked for at its allocation, reallocated at its reallocations and given back at its
 * free, so that the allocator sees the calls it would see without memlens. block.c gives one back
 * through `release` (set once, before the first placeholder), only ever outside the runtime (never
 * from a signal handler that interrupted it: that free waits with its block). */
void ml_block_placeholders(void (*release)(void *));
/* Have sampled blocks placeholders (set by the first)? Then the allocator's own figures count them
 * already, as without memlens, and the timeline adds none of the range's bytes to them. */
int ml_blocks_placed(void);
static inline void *ml_block_placeholder(void *p) { return ml_block_of(p)->placeholder; }
static inline void ml_block_set_placeholder(void *p, void *ph) { ml_block_of(p)->placeholder = ph; }
/* realloc of a sampled block to n > 0 bytes (room: its usable size then, >= n): in place, or moved (within the range when it can, else
 * out to `out`, the malloc of the family the realloc came through); NULL if no memory (p is left as
 * it was). */
void *ml_block_realloc(void *p, size_t n, size_t room, uintptr_t ra, void *(*out)(size_t));
/* mimalloc's heaps (hooks.c): the sampled block p was asked of `heap` (NULL: a thread's backing
 * heap, or no mimalloc); mi_heap_destroy of heap frees its sampled blocks (destroyed = 1: they
 * leave the live counts, their allocations stay counted), mi_heap_delete moves them to the backing
 * heap (destroyed = 0: they stay live). */
void ml_block_set_heap(void *p, void *heap);
void ml_blocks_heap_gone(const void *heap, int destroyed);
/* fork child: inherited blocks, a fresh peak and timeline (fork.c then starts the views' dumps anew) */
void ml_blocks_fork_child(void);
/* fork child, its stack table just copied (state.c): the live columns again from its own blocks */
void ml_blocks_recount(void);
/* ml_reset: reallocations pending before it are not counted */
void ml_blocks_reset(void);
/* Before a dump's stack lines (dump lock held): what live blocks have not flushed yet, per stack
 * (ml_blocks_unflushed: alloc_fx, alloc_bytes, inuse_fx, inuse_bytes to add), and the heap
 * estimate's share of it. */
void ml_blocks_dump_begin(void);
void ml_blocks_unflushed(const struct ml_stack *r, int64_t d[4]);
int64_t ml_blocks_dump_heap(void);

#pragma GCC visibility pop
#endif
