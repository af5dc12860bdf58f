/* The configuration, read from the environment once before main (config.c). ml_cfg itself is
 * declared in rt.h, as every file reads it. */
#ifndef MEMLENS_CONFIG_H
#define MEMLENS_CONFIG_H
#include "rt.h"

#pragma GCC visibility push(hidden)

/* Read MEMLENS_* into ml_cfg and the copies below (ml_init, first thing: nothing else has run). */
void ml_config_read(void);
/* MEMLENS_CTL_DIR and MEMLENS_RUN_DIR as they were at start-up ("" if unset): copies, because
 * programs that set their process title overwrite the environment in place. */
extern char ml_ctl_dir_env[4000];
extern char ml_run_dir_env[4000];
/* "dwarf", "fp", "libgcc" or "libunwind" for an ML_UNW_* value. */
const char *ml_unwinder_name(int u);

#pragma GCC visibility pop
#endif
