/* Messages on stderr: one line each, `memlens: ` first, written with write(2) from the stack (no
 * stdio, no malloc: they are printed from inside malloc, in fork children and from _exit). */
#ifndef MEMLENS_LOG_H
#define MEMLENS_LOG_H
#include "rt.h"

#pragma GCC visibility push(hidden)

void ml_log(const char *msg);
/* An internal failure: profiling stops for good (ml_cfg.failed), the program continues. The
 * message is printed the first time only, with a line saying so. */
void ml_fail(const char *why);

#pragma GCC visibility pop
#endif
