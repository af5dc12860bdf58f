/* What every unwinder needs of a thread's stack: its top, whether a stack pointer lies on it (or on
 * a coroutine's, a fiber's or a sigaltstack), and whether a word of a foreign stack can be read. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../base/proc.h"
#include "bounds.h"

extern void *__libc_stack_end;

/* Upper bound of the current thread's stack, without pthread_getattr_np: that function takes the
 * thread's lock and then mallocs, so sampling its malloc and asking it again from here deadlocks
 * (Rust's std calls it at every thread start). glibc places a thread's descriptor (pthread_self())
 * at the top of the thread's stack, above every frame; the main thread's frames lie below
 * __libc_stack_end. */
uintptr_t ml_stack_top(void)
{
    struct ml_thread *t = &ml_tls;
    if (!t->stack_hi) {
        uintptr_t self = (uintptr_t)pthread_self(), here = (uintptr_t)__builtin_frame_address(0);
        uintptr_t main_hi = (uintptr_t)__libc_stack_end;
        t->stack_hi = (self > here && self - here < (1ul << 30)) ? self : main_hi;
    }
    return t->stack_hi;
}

/* How far below its top a thread's own stack may reach: the stack size limit, which is also
 * glibc's default thread stack size (less a margin for the thread descriptor at its top). */
static uintptr_t own_span = 8u << 20;

int ml_on_own_stack(uintptr_t sp, uintptr_t hi) { return sp < hi && hi - sp < own_span; }

/* Can the 8 bytes at addr be read? For walks on a stack that is not the thread's own (a coroutine,
 * a fiber, a sigaltstack), whose bounds we do not know: the kernel tells (process_vm_readv on
 * ourselves), without a fault. One system call per page; the last good page is remembered. */
static __thread uintptr_t readable_page;
int ml_readable(uintptr_t addr)
{
    uintptr_t page = addr & ~(uintptr_t)4095;
    if (addr & 7)
        return 0;
    /* Under a seccomp filter the runtime keeps to its minimal set of system calls: a foreign stack
     * is not read (its walk ends there, truncated). Docker's default filter, for one, refuses
     * process_vm_readv to a process without CAP_SYS_PTRACE. */
    if (ml_seccomp_filtered())
        return 0;
    if (page == readable_page)
        return 1;
    uintptr_t v;
    struct iovec here = {&v, sizeof v}, there = {(void *)addr, sizeof v};
    if (process_vm_readv(getpid(), &here, 1, &there, 1, 0) != (ssize_t)sizeof v)
        return 0;
    readable_page = page;
    return 1;
}

void ml_bounds_setup(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > (128u << 10))
        own_span = rl.rlim_cur - (64u << 10);
    else if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY)
        own_span = 1ul << 30;
    ml_stack_top();
}
