/* Forked children sample independently: the parent forks CHILDREN children one after another; each
 * allocates one block of SIZE bytes (child_site) and leaves with _exit. At interval R each child's
 * block is sampled with probability 1 - exp(-SIZE/R), independently of its siblings, so the number of
 * children whose profile holds a sample is Binomial(CHILDREN, p) — not 0 or CHILDREN, which is what
 * children sharing the parent's random state and countdown would give.
 *   fork_children [CHILDREN] [SIZE]   (defaults 100 and 200000) */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static __attribute__((noinline)) void child_site(size_t size)
{
    char *p = malloc(size);
    if (!p)
        _exit(1);
    memset(p, 1, size);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    size_t size = argc > 2 ? strtoull(argv[2], NULL, 0) : 200000;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            child_site(size);
            _exit(0);
        }
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
    }
    return 0;
}
