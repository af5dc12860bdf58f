/* fork while another thread is inside dl_iterate_phdr (holding the loader's lock, here for a long
 * while): the child inherits that lock held by a thread that does not exist there. Its exit dump
 * must not wait for it. Prints "child exited <status>". */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int inside;
static void *volatile keep;

static int slow(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info, (void)size, (void)arg;
    inside = 1;
    usleep(300 * 1000);
    return 1;
}

static void *iterate(void *arg)
{
    (void)arg;
    for (;;)
        dl_iterate_phdr(slow, NULL);
    return NULL;
}

int main(void)
{
    keep = malloc(4 << 20);
    pthread_t t;
    pthread_create(&t, NULL, iterate, NULL);
    while (!inside)
        usleep(1000);
    usleep(20 * 1000);
    pid_t p = fork();
    if (p == 0) {
        keep = malloc(4 << 20);
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    printf("child exited %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    fflush(stdout);
    _exit(0);
}
