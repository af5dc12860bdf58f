/* A program whose allocations the otel_memory USDT tests (tests/e2e/usdt.rs) count with bpftrace, and
 * whose live heap the exact-mode tests (tests/e2e/exact.rs) read back.
 *
 *   usdt_target DIR [MiB]
 *
 * It writes its pid to DIR/pid, waits for DIR/go (so a tracer, or memlens attach, is in place
 * first), then allocates blocks of 64 B … 32 KiB (256 MiB in all by default, or MiB), frees 7 of
 * every 8 at once and keeps the 8th: an eighth of the bytes stays held. It prints what it
 * allocated and holds (`allocated N held N` in bytes, its own count), writes DIR/done, and exits
 * when DIR/stop appears (or after 120 s, so a failed test never leaves it behind), holding its
 * blocks to the end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[3072];

static int exists(const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* DIR/name holding `text`, whole or absent (the test polls for it); open and write: no stdio
 * buffer, so nothing is allocated before DIR/go. */
static void touch(const char *name, const char *text)
{
    char p[4096], tmp[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        exit(4);
    close(fd);
    rename(tmp, p);
}

static void wait_file(const char *name)
{
    for (int i = 0; i < 12000 && !exists(name); i++)
        usleep(10000);
}

__attribute__((noinline)) static void *usdt_site(size_t n)
{
    char *p = malloc(n);
    if (p)
        memset(p, 1, n < 64 ? n : 64);
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    snprintf(dir, sizeof dir, "%s", argv[1]);
    uint64_t total = (uint64_t)(argc > 2 ? atoi(argv[2]) : 256) << 20;
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    touch("pid", pid);
    wait_file("go");

    static void *held[1 << 16]; /* static: not an allocation of its own to count */
    size_t cap = sizeof held / sizeof *held, nheld = 0;
    uint64_t allocated = 0, holding = 0, x = 88172645463325252ull;
    for (uint64_t i = 0; allocated < total && nheld < cap; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t n = 64 + (size_t)(x % (32768 - 64));
        void *p = usdt_site(n);
        if (!p)
            return 3;
        allocated += n;
        if (i % 8 == 7) {
            held[nheld++] = p;
            holding += n;
        } else {
            free(p);
        }
    }
    char line[96];
    snprintf(line, sizeof line, "allocated %llu held %llu\n", (unsigned long long)allocated,
             (unsigned long long)holding);
    touch("done", line);
    wait_file("stop");
    return 0;
}
