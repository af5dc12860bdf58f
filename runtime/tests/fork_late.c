/* A fork child whose parent goes on allocating before the child samples anything (tests/e2e/
 * survival.rs): the child's profile must hold what the child holds, not what the parent counted
 * after the fork. Prints the child's pid.
 *
 *   kept       16 MiB in 64 KiB blocks, live in both at the fork
 *   parent_on  the parent, after the fork: frees half of `kept`'s blocks, then 32 MiB more, live
 *   child_own  the child, once the parent is done (a pipe): 8 MiB, live at its exit */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK (64 * 1024)

static __attribute__((noinline)) void *grab(size_t n)
{
    void *p = malloc(n);
    if (!p)
        exit(3);
    memset(p, 1, n);
    return p;
}

static __attribute__((noinline)) void kept(void **v, int n)
{
    for (int i = 0; i < n; i++)
        v[i] = grab(BLOCK);
}

static __attribute__((noinline)) void parent_on(void **v, int n)
{
    for (int i = 0; i < n; i += 2)
        free(v[i]);
    for (int i = 0; i < 512; i++)
        (void)grab(BLOCK);
}

static __attribute__((noinline)) void child_own(void)
{
    for (int i = 0; i < 128; i++)
        (void)grab(BLOCK);
}

int main(void)
{
    static void *v[256];
    kept(v, 256);
    int go[2];
    if (pipe(go) != 0)
        return 2;
    fflush(stdout);
    pid_t c = fork();
    if (c < 0)
        return 5;
    if (c == 0) {
        char b;
        close(go[1]);
        if (read(go[0], &b, 1) != 1)
            _exit(6);
        child_own();
        return 0;
    }
    close(go[0]);
    parent_on(v, 256);
    if (write(go[1], "g", 1) != 1)
        return 7;
    int st = 0;
    waitpid(c, &st, 0);
    printf("%d\n", (int)c);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 8;
}
