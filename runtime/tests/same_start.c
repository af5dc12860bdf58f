/* Allocations that start from the same place (same call site, same stack pointer, same rbp) but
 * come from different callers: the dwarf unwinder's stack cache must tell them apart by the stack
 * words that differ (here, leaf's return address into a or into b).
 * Prints the truth: "a <count> <bytes>" and "b <count> <bytes>". */
#include <stdio.h>
#include <stdlib.h>

static void *volatile sink;
static volatile long calls_a, calls_b; /* different bodies: the compiler must not fold a and b */

static __attribute__((noinline)) void leaf(size_t n)
{
    sink = malloc(n);
    free(sink);
}

static __attribute__((noinline)) void a(size_t n)
{
    leaf(n);
    calls_a++; /* not a tail call: a's frame stays on the stack */
}

static __attribute__((noinline)) void b(size_t n)
{
    leaf(n);
    calls_b++;
}

int main(void)
{
    long na = 0, nb = 0;
    for (int i = 0; i < 3000; i++) {
        if ((i * 7) % 5 < 2) {
            a(100);
            na++;
        } else {
            b(200);
            nb++;
        }
    }
    printf("a %ld %ld\nb %ld %ld\n", na, na * 100, nb, nb * 200);
    return 0;
}
