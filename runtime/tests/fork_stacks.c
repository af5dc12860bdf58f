/* Forks after recording many distinct stacks (run it in exact mode):
 *   fork_stacks cow      the child prints its private dirty memory right after fork, before it
 *                        allocates (its first sample would copy the table: docs/survival.md)
 *                        ("child_dirty_kib N") and the parent the size of its stack records
 *   fork_stacks path     the child looks for `true` along a PATH of 50 missing directories with
 *                        execve, as shells and language runtimes do, then runs it
 *   fork_stacks threads  the child counts its threads right after fork, after 300 ms without
 *                        allocating, and after allocating 8 MiB ("child_threads A B C")
 *   fork_stacks idle     the child prints "child PID" and sleeps 3 s without allocating */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
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


/* The number after `key` in a /proc/self file of "Key: value" lines, or -1. */
static long proc_value(const char *file, const char *key)
{
    FILE *f = fopen(file, "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && sscanf(line + n, " %ld", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

static long threads(void) { return proc_value("/proc/self/status", "Threads:"); }

static long private_dirty_kib(void) { return proc_value("/proc/self/smaps_rollup", "Private_Dirty:"); }

/* The same without stdio: a fork child measures itself before it allocates anything (an allocation
 * under memlens --exact is a sample, and a child's first sample copies its parent's stack table). */
static long private_dirty_kib_raw(void)
{
    char b[4096];
    int fd = open("/proc/self/smaps_rollup", O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, b, sizeof b - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    b[n] = 0;
    char *p = strstr(b, "Private_Dirty:");
    return p ? strtol(p + 14, NULL, 10) : -1;
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


int main(int argc, char **argv)
{
    int cow = argc > 1 && !strcmp(argv[1], "cow");
    for (unsigned b = 0; cow && b < (1u << 16); b++)
        walk(b, 16);
    long before = private_dirty_kib();
    pid_t p = fork();
    if (p == 0 && argc > 1 && !strcmp(argv[1], "threads"))
        _exit(child_threads());
    if (p == 0 && argc > 1 && !strcmp(argv[1], "idle")) {
        char line[32];
        int n = snprintf(line, sizeof line, "child %d\n", (int)getpid());
        if (write(1, line, (size_t)n) != n)
            _exit(1);
        struct timespec d = {3, 0};
        nanosleep(&d, NULL);
        _exit(0);
    }
    if (p == 0) {
        if (cow) {
            long d = private_dirty_kib_raw();
            printf("child_dirty_kib %ld\n", d);
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
