/* Memory over time: heap, RSS and the allocator's figures (timeline.c). */
#ifndef MEMLENS_TIMELINE_H
#define MEMLENS_TIMELINE_H
#include "../base/views.h"

#pragma GCC visibility push(hidden)

/* Take a point if the period elapsed, or now (a new peak). */
enum { ML_TL_PERIODIC, ML_TL_PEAK, ML_TL_DUMP };
void ml_timeline_tick(uint64_t now, int why);
/* A dump's point, its heap with the dump's `unflushed` share (block.c): it leaves the allocator's
 * figures unknown (a dump may run in a signal handler; the figures it has may be old). */
void ml_timeline_dump(uint64_t now, int64_t unflushed);
extern _Atomic uint64_t ml_timeline_next; /* tick of the next periodic point */
void ml_timeline_write(struct ml_out *o);
/* The malloc our malloc forwards to (intercept/boot.c, attach.c): the allocator whose figures the
 * points carry is the one in its file (allocstats.c reads them). */
void ml_timeline_allocator(void *(*malloc_fn)(size_t));
/* Fork child: the points so far are the parent's. */
void ml_timeline_fork_child(void);

#pragma GCC visibility pop
#endif
