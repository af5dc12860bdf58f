/* Torture: processes. `torture_fork chain N` allocates, forks, and the child execs `chain N-1`
 * (fork+exec chain); `torture_fork spawn N` forks N children that allocate and leave through exit()
 * or _exit() without exec. Prints a deterministic line per step so output can be compared with and
 * without the profiler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static __attribute__((noinline)) unsigned long churn(int rounds)
{
    unsigned long sum = 0;
    for (int i = 0; i < rounds; i++) {
        size_t n = 1024 + (size_t)(i % 64) * 4096;
        char *p = malloc(n);
        memset(p, i & 0xff, n);
        sum += (unsigned char)p[n / 2];
        free(p);
    }
    return sum;
}

static int chain(const char *self, int n)
{
    printf("chain %d sum %lu\n", n, churn(3000));
    fflush(stdout);
    if (n == 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        char arg[16];
        snprintf(arg, sizeof arg, "%d", n - 1);
        execl(self, self, "chain", arg, (char *)NULL);
        perror("execl");
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static int spawn(int n)
{
    for (int i = 0; i < n; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            printf("child %d sum %lu\n", i, churn(2000 + i));
            fflush(stdout);
            if (i % 2)
                _exit(0);
            exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
    }
    printf("parent sum %lu\n", churn(1000));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "chain"))
        return chain(argv[0], atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "spawn"))
        return spawn(atoi(argv[2]));
    fprintf(stderr, "usage: %s chain N | spawn N\n", argv[0]);
    return 2;
}
