/* Every event of a sampled block, and every figure it feeds (block.c explains). */
#ifndef MEMLENS_BLOCK_H
#define MEMLENS_BLOCK_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* A sampled block of `size` bytes on stack `id` with weights (w_fx, w_bytes), from call site ra. */
void *ml_block_new(size_t size, size_t align, int zero, uint32_t id, uint64_t w_fx, uint64_t w_bytes,
                   uintptr_t ra);
void ml_sampled_free(void *p);
/* realloc of a sampled block to n > 0 bytes: in place, or moved (within the range when it can, else
 * out to `out`, the malloc of the family the realloc came through); NULL if no memory (p is left as
 * it was). */
void *ml_block_realloc(void *p, size_t n, uintptr_t ra, void *(*out)(size_t));
/* fork child: inherited blocks, a fresh peak and timeline (fork.c then starts the views' dumps anew) */
void ml_blocks_fork_child(void);
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
