/* Allocations made on a ucontext coroutine's stack, whose outermost frame holds a frame pointer into
 * an unreadable page (as fibers that never set rbp leave it): the stack walkers must stop there (or
 * hand the stack to a fallback) instead of reading it. Prints "ok <checksum>". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#define STACK (256 << 10)
static ucontext_t main_ctx, co_ctx;
static unsigned long sum;
static void *volatile sink; /* keeps the compiler from eliding malloc/free pairs */

static __attribute__((noinline)) void work(int depth)
{
    if (depth) {
        work(depth - 1);
        __asm__ volatile("" ::: "memory");
        return;
    }
    for (int i = 0; i < 2000; i++) {
        char *p = malloc(64 << 10);
        p[0] = (char)i;
        sink = p;
        sum += (unsigned char)p[0];
        free(sink);
    }
}

static void entry(void)
{
    work(5);
    swapcontext(&co_ctx, &main_ctx);
}

int main(void)
{
    /* The coroutine stack, with an unreadable page right above it. */
    char *m = mmap(NULL, STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + STACK, 4096, PROT_NONE) != 0)
        return 1;
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = m;
    co_ctx.uc_stack.ss_size = STACK;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, entry, 0);
    co_ctx.uc_mcontext.gregs[REG_RBP] = (greg_t)(m + STACK + 64); /* the unreadable page */
    swapcontext(&main_ctx, &co_ctx);
    printf("ok %lu\n", sum);
    return 0;
}
