/* Grows its resident memory by 400 MiB with anonymous mmap (memory memlens does not sample yet),
 * then waits 3 s: tests/e2e/allocators.rs checks that memlens says it is blind to it. */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(void)
{
    size_t n = (size_t)400 << 20;
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    memset(p, 1, n);
    sleep(3);
    return p[n - 1] == 1 ? 0 : 2;
}
