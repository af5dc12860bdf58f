/* Keeps a 64 MiB anonymous mapping (at keep_mapping) and unmaps an 8 MiB one: the profile must show
 * the first at its call site as anonymous mmap, and not the second (tests/e2e/mmap.rs). */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
__attribute__((noinline)) void *keep_mapping(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 1, n);
    return p;
}
int main(void)
{
    void *p = keep_mapping(64u << 20);
    void *q = keep_mapping(8u << 20);
    munmap(q, 8u << 20);
    printf("%p\n", p);
    fflush(stdout);
    sleep(1);
    return 0;
}
