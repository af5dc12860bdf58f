/* The globals rt.h and views.h declare, which every floor reads: the configuration, the per-thread
 * state and whether the views run. Defined here, below everything, so that reading them ties a file
 * to nothing but the base (config.c fills ml_cfg in; log.c's ml_fail switches it off). */
#include "rt.h"
#include "views.h"

__thread struct ml_thread ml_tls;
struct ml_config ml_cfg = {.interval = 524288, .active = 1, .max_depth = 64, .unwinder = -1};
_Atomic int ml_views_on = 1;
