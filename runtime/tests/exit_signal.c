/* _exit from a signal handler, two ways the exit dump used to hang or crash the program:
 *   exit_signal altstack   the handler runs on an 8 KiB sigaltstack with an unreadable page below
 *   exit_signal dumping DIR  the handler interrupts the program's own memlens_dump (the thread holds
 *                            the dump lock) many times a second
 * Either way the program must leave with status 3, promptly. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>

#define MEMLENS_WEAK
#include <memlens.h>

static void *volatile keep[64];

static void leave(int sig)
{
    (void)sig;
    _exit(3);
}

int main(int argc, char **argv)
{
    for (int i = 0; i < 64; i++)
        keep[i] = malloc(1 << 20); /* sampled: the exit dump has stacks to write */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = leave;
    if (argc > 1 && !strcmp(argv[1], "altstack")) {
        char *m = mmap(NULL, 4096 + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED || mprotect(m, 4096, PROT_NONE) != 0)
            return 1;
        stack_t ss = {.ss_sp = m + 4096, .ss_size = 8192};
        if (sigaltstack(&ss, NULL) != 0)
            return 1;
        sa.sa_flags = SA_ONSTACK;
        sigaction(SIGUSR1, &sa, NULL);
        raise(SIGUSR1);
        return 1;
    }
    if (argc > 2 && !strcmp(argv[1], "dumping")) {
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {.it_value = {.tv_usec = 20000}};
        setitimer(ITIMER_REAL, &it, NULL);
        char path[4096];
        for (int i = 0;; i++) {
            snprintf(path, sizeof path, "%s/api-%d.raw", argv[2], i);
            if (memlens_dump && memlens_dump(path) != 0)
                return 1;
            unlink(path);
        }
    }
    return 2;
}
