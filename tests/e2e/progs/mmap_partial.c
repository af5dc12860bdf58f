/* Mappings partly unmapped or resized (tests/e2e/mmap.rs): 64 MiB at cut_mapping with a 16 MiB hole
 * unmapped from its middle keeps 48 MiB live; 32 MiB at remap_mapping shrunk to 8 MiB, then grown
 * to 24 MiB with mremap, keeps 24 MiB. Each is touched, so its pages are resident. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#define MiB (1ul << 20)
__attribute__((noinline)) char *cut_mapping(void)
{
    char *p = mmap(NULL, 64 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 1, 64 * MiB);
    munmap(p + 16 * MiB, 16 * MiB);
    return p;
}
__attribute__((noinline)) char *remap_mapping(void)
{
    char *p = mmap(NULL, 32 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 1, 32 * MiB);
    p = mremap(p, 32 * MiB, 8 * MiB, MREMAP_MAYMOVE);
    p = mremap(p, 8 * MiB, 24 * MiB, MREMAP_MAYMOVE);
    memset(p, 2, 24 * MiB);
    return p;
}
int main(void)
{
    char *a = cut_mapping(), *b = remap_mapping();
    if (a == MAP_FAILED || b == MAP_FAILED)
        return 1;
    printf("%p %p\n", (void *)a, (void *)b);
    fflush(stdout);
    return 0;
}
