/* The raw dump (dump.c; format in runtime/README.md). Every function is malloc-free; the dumps
 * themselves take the dump lock (one at a time). */
#ifndef MEMLENS_DUMP_H
#define MEMLENS_DUMP_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* Write a raw dump to `path`, created with O_EXCL. `reason` is one word (exit, exec, ctl, api,
 * fork-child-exit). Returns 0 or -errno. */
int ml_dump(const char *path, const char *reason);
/* Dump to the next `<MEMLENS_OUT>.<pid>.<seq>.raw`. Returns 0, -errno, or -EINVAL if MEMLENS_OUT is
 * unset. */
int ml_dump_auto(const char *reason);
/* The same, telling which <seq>; and taking that dump back (a failed exec). */
int ml_dump_auto_seq(const char *reason, uint64_t *which);
void ml_dump_auto_remove(uint64_t which);
void ml_dump_lock(void);
void ml_dump_unlock(void);
void ml_dump_lock_reset(void);

#pragma GCC visibility pop
#endif
