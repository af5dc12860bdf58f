/* The loader's r_debug, the one it keeps up to date (rdebug.c). */
#ifndef MEMLENS_RDEBUG_H
#define MEMLENS_RDEBUG_H
#include <link.h>

#pragma GCC visibility push(hidden)

/* The r_debug the dynamic loader updates at every dlopen and dlclose (its list of objects, its
 * state, the address of its notification). Never NULL. */
struct r_debug *ml_r_debug(void);

#pragma GCC visibility pop
#endif
