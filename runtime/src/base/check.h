/* Debug invariants, as mimalloc's mi_assert_internal: ML_ASSERT(cond) aborts with the condition and
 * its place when a debug build (-DMEMLENS_DEBUG=1) finds it false, and compiles to nothing in a
 * release build, so invariants can be stated on the hot paths for free. The condition is still
 * type-checked in release (sizeof does not evaluate it), so it cannot rot unnoticed. The failure
 * path prints with one write(2) of a string literal: no malloc, no stdio, no formatting. */
#ifndef MEMLENS_CHECK_H
#define MEMLENS_CHECK_H

#if defined(MEMLENS_DEBUG) && MEMLENS_DEBUG
#include <stdlib.h>
#include <unistd.h>

#define ML_STR_(x) #x
#define ML_STR(x) ML_STR_(x)
/* #c is taken here, in ML_ASSERT itself: passed on to another macro, c would be macro-expanded first
 * and the message would show the expansion instead of the condition as written. */
#define ML_ASSERT_MSG(text) "memlens: internal assertion failed: " text " (" __FILE__ ":" ML_STR(__LINE__) ")\n"

__attribute__((noreturn, cold)) static inline void ml_assert_fail(const char *msg, size_t len)
{
    ssize_t r = write(2, msg, len);
    (void)r;
    abort();
}

#define ML_ASSERT(c) \
    (likely(c) ? (void)0 : ml_assert_fail(ML_ASSERT_MSG(#c), sizeof(ML_ASSERT_MSG(#c)) - 1))
#else
#define ML_ASSERT(c) ((void)sizeof(!(c)))
#endif

#endif
