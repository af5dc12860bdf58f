/* The allocator's own figures for the timeline (allocstats.c), read by the runtime's thread only. */
#ifndef MEMLENS_ALLOCSTATS_H
#define MEMLENS_ALLOCSTATS_H
#include "../base/out.h"

#pragma GCC visibility push(hidden)

/* The malloc our malloc forwards to (intercept/boot.c, attach.c): the allocator whose figures the
 * points carry is the one in its file. */
void ml_allocstats_allocator(void *(*malloc_fn)(size_t));
/* From the runtime's thread (control/ctl.c), never from the program's: read the figures if a read
 * is due and affordable. Returns the milliseconds until it wants to be called again, or -1 (never:
 * no figures to read, or reading them was given up). */
int64_t ml_allocstats_poll(void);
/* The figures of the latest read, or -1 each when there is none recent enough for a point now. */
void ml_allocstats_latest(int64_t *in_use, int64_t *footprint);
/* `view allocator <kind>` and `view allocator_stats …` (runtime/README.md). */
void ml_allocstats_write(struct ml_out *o);
/* Fork child: the figures so far are the parent's. */
void ml_allocstats_fork_child(void);

#pragma GCC visibility pop
#endif
