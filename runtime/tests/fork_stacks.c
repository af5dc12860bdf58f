/* Forks after recording many distinct stacks (run it in exact mode):
 *   fork_stacks cow      the child prints its private dirty memory right after fork
 *                        ("child_dirty_kib N") and the parent the size of its stack records
 *   fork_stacks path     the child looks for `true` along a PATH of 50 missing directories with
 *                        execve, as shells and language runtimes do, then runs it
 *   fork_stacks threads  the child counts its threads right after fork, after 300 ms without
 *                        allocating, and after allocating 8 MiB ("child_threads A B C") */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *volatile sink;

/* 2^16 distinct call paths: each level calls one of two functions. */
static __attribute__((noinline)) void leaf(void) { sink = malloc(24); free(sink); }
static void walk(unsigned bits, int depth);
static __attribute__((noinline)) void left(unsigned bits, int depth) { walk(bits, depth); __asm__ volatile(""); }
static __attribute__((noinline)) void right(unsigned bits, int depth) { walk(bits, depth); __asm__ volatile(""); }
static __attribute__((noinline)) void walk(unsigned bits, int depth)
{
    if (!depth)
        leaf();
    else if (bits & 1)
        left(bits >> 1, depth - 1);
    else
        right(bits >> 1, depth - 1);
    __asm__ volatile("");
}

static long threads(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %ld", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

static int child_threads(void)
{
    long a = threads();
    struct timespec d = {0, 300 * 1000 * 1000};
    nanosleep(&d, NULL);
    long b = threads();
    for (int i = 0; i < (8 << 20) / 64; i++) {
        sink = malloc(64);
        free(sink);
    }
    d.tv_nsec = 100 * 1000 * 1000;
    nanosleep(&d, NULL);
    printf("child_threads %ld %ld %ld\n", a, b, threads());
    fflush(stdout);
    return 0;
}

static long private_dirty_kib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Private_Dirty: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

int main(int argc, char **argv)
{
    int cow = argc > 1 && !strcmp(argv[1], "cow");
    for (unsigned b = 0; cow && b < (1u << 16); b++)
        walk(b, 16);
    long before = private_dirty_kib();
    pid_t p = fork();
    if (p == 0 && argc > 1 && !strcmp(argv[1], "threads"))
        _exit(child_threads());
    if (p == 0) {
        if (cow) {
            printf("child_dirty_kib %ld\n", private_dirty_kib());
            fflush(stdout);
            _exit(0);
        }
        char *args[] = {"true", NULL};
        for (int i = 0; i < 50; i++) {
            char path[64];
            snprintf(path, sizeof path, "/nonexistent/dir%d/true", i);
            execve(path, args, NULL);
        }
        execve("/bin/true", args, NULL);
        _exit(127);
    }
    int st;
    waitpid(p, &st, 0);
    if (cow)
        printf("parent_dirty_kib %ld\n", before);
    printf("child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
