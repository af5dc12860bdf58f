/* Pressure on the runtime's private range of sampled blocks (every block here is big enough to be
 * sampled almost surely):
 *   range_pressure N KIB FINAL_KIB
 * keeps N blocks of KIB KiB + 4 KiB live at once (one byte touched in each), frees them, then keeps
 * one block of FINAL_KIB KiB + 4 KiB live until exit (none if FINAL_KIB is 0). Space freed in the first phase must serve the
 * second (freed chunks merge), a size just over a power of two must not take twice the room, and a
 * full range must be reported, not silent. Prints "ok" or what failed. */
#include <stdio.h>
#include <stdlib.h>

static __attribute__((noinline)) char *phase1(size_t n) { return malloc(n); }
static __attribute__((noinline)) char *phase2(size_t n) { return malloc(n); }

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    size_t n = strtoull(argv[1], NULL, 10), size = (strtoull(argv[2], NULL, 10) << 10) + 4096;
    size_t final = (strtoull(argv[3], NULL, 10) << 10) + 4096;
    char **blocks = calloc(n, sizeof *blocks);
    for (size_t i = 0; i < n; i++) {
        blocks[i] = phase1(size);
        if (!blocks[i]) {
            printf("malloc %zu failed\n", i);
            return 1;
        }
        blocks[i][i % size] = 1;
    }
    for (size_t i = 0; i < n; i++)
        free(blocks[i]);
    char *last = final > 4096 ? phase2(final) : NULL;
    if (final > 4096 && !last) {
        printf("final malloc failed\n");
        return 1;
    }
    if (last)
        last[final - 1] = 1;
    printf("ok\n");
    return 0;
}
