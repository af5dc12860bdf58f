/* Grows its resident memory by 400 MiB with anonymous memory mapped by the system call itself (as a
 * runtime with its own system-call layer does: memlens samples mmap through the C library's entry,
 * not the raw syscall), then waits 3 s: tests/e2e/allocators.rs checks that memlens says it is
 * blind to it. */
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
    size_t n = (size_t)400 << 20;
    char *p = (char *)syscall(SYS_mmap, NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == (char *)-1)
        return 1;
    memset(p, 1, n);
    sleep(3);
    return p[n - 1] == 1 ? 0 : 2;
}
