/* The views' dump lines: lifetimes and live ages per stack, the heap, peak and timeline (lifetime.c). */
#ifndef MEMLENS_LIFETIME_H
#define MEMLENS_LIFETIME_H
#include "../base/views.h"

#pragma GCC visibility push(hidden)

/* The `life` line that follows each `stack` line of a dump. */
void ml_views_write_stack(struct ml_out *o, struct ml_stack *r);
/* The `view` and `tl` lines, written just before a dump's `end`. */
void ml_views_write(struct ml_out *o);
/* Fork child: no dump written yet by this process (growth since the previous dump is unknown). */
void ml_views_fork_child(void);

#pragma GCC visibility pop
#endif
