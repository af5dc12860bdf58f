/* Ends that skip the runtime's exit dump, each after allocating a known amount (tests/e2e/survival.rs):
 *
 *   survive exit_group     leaves with the raw exit_group system call (as the Go runtime does)
 *   survive sigkill        kills itself with SIGKILL
 *   survive sigterm        raises SIGTERM with no handler installed
 *   survive oom            allocates and touches memory until something kills it
 *   survive daemon         double fork: the parent returns, the grandchild (setsid, parent gone) waits
 *                          for the file $TRUTH.go, allocates and exits
 *   survive setuid         forks a child that drops to uid/gid 65534, allocates and exits normally
 *   survive setuid-exec    the same child then execs `survive alloc 2` as uid 65534
 *   survive alloc ROLE     allocates and exits normally
 *   survive grab           allocates 1 MiB blocks until malloc fails, prints how many it got
 *   survive later          waits for the file $TRUTH.go, allocates and exits normally
 *
 * The program's own count of what it allocated goes into the file named by $TRUTH (or the descriptor
 * $TRUTH_FD, inherited across exec by a child that can no longer open the file): a MAP_SHARED page of
 * slots { pid, allocated bytes, live bytes, done }, one slot per role (0: the main process, 1: the
 * child or daemon, 2: the exec'd child), updated after every allocation, so it survives any end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct slot {
    volatile uint64_t pid, allocated, live, done;
};
static struct slot *truth;
static char truth_path[4096];

static void map_truth(void)
{
    const char *fdv = getenv("TRUTH_FD"), *path = getenv("TRUTH");
    int fd = fdv ? atoi(fdv) : -1;
    if (fd < 0 && path) {
        snprintf(truth_path, sizeof truth_path, "%s", path);
        fd = open(path, O_RDWR); /* not O_CLOEXEC: an exec'd child of setuid-exec gets it */
    }
    if (fd < 0 || ftruncate(fd, 4096) != 0) {
        fprintf(stderr, "survive: no TRUTH file\n");
        exit(2);
    }
    truth = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (truth == MAP_FAILED)
        exit(2);
    char n[16];
    snprintf(n, sizeof n, "%d", fd);
    setenv("TRUTH_FD", n, 1);
}

/* Blocks of 1..64 KiB (a fixed sequence), `mib` MiB in all; every other one is freed at once, the
 * rest stay live (and are touched, so that they are resident). */
static void allocate(int role, uint64_t mib)
{
    struct slot *s = &truth[role];
    s->pid = (uint64_t)getpid();
    uint64_t x = 88172645463325252ull + (uint64_t)role;
    for (uint64_t total = 0; total < (mib << 20);) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = 1024 + (size_t)(x % (63 * 1024));
        char *p = malloc(n);
        if (!p)
            exit(3);
        memset(p, 1, n);
        total += n;
        s->allocated += n;
        if (x & 1)
            free(p);
        else
            s->live += n;
    }
    s->done = 1;
}

static uint64_t mib(void)
{
    const char *v = getenv("ALLOC_MIB");
    return v ? strtoull(v, NULL, 10) : 64;
}

static void drop_privileges(void)
{
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
        perror("survive: cannot drop privileges");
        _exit(4);
    }
}

/* Until the file `<truth>.go` exists (30 s at most). */
static void wait_for_go(void)
{
    char go[4200];
    snprintf(go, sizeof go, "%s.go", truth_path);
    for (int i = 0; i < 3000 && access(go, F_OK) != 0; i++) {
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *mode = argv[1];
    map_truth();
    if (!strcmp(mode, "alloc")) {
        allocate(argc > 2 ? atoi(argv[2]) : 0, mib());
        return 0;
    }
    if (!strcmp(mode, "later")) {
        truth[0].pid = (uint64_t)getpid();
        wait_for_go();
        allocate(0, mib());
        return 0;
    }
    if (!strcmp(mode, "grab")) {
        uint64_t n = 0;
        while (malloc(1 << 20))
            n++;
        printf("%llu\n", (unsigned long long)n);
        return 0;
    }
    if (!strcmp(mode, "exit_group")) {
        allocate(0, mib());
        syscall(SYS_exit_group, 0);
    }
    if (!strcmp(mode, "sigkill")) {
        allocate(0, mib());
        kill(getpid(), SIGKILL);
    }
    if (!strcmp(mode, "sigterm")) {
        allocate(0, mib());
        raise(SIGTERM);
    }
    if (!strcmp(mode, "oom")) {
        truth[0].pid = (uint64_t)getpid();
        for (;;) {
            size_t n = 64 * 1024 + (size_t)(truth[0].allocated % (960 * 1024));
            char *p = malloc(n);
            if (!p)
                abort(); /* as xmalloc does: under an address-space limit, a death by signal */
            memset(p, 1, n);
            truth[0].allocated += n;
            truth[0].live += n;
        }
    }
    if (!strcmp(mode, "daemon")) {
        truth[0].pid = (uint64_t)getpid();
        pid_t c = fork();
        if (c < 0)
            return 5;
        if (c > 0) {
            waitpid(c, NULL, 0);
            return 0; /* the parent returns at once, as a daemon's launcher does */
        }
        setsid();
        if (fork() != 0)
            _exit(0);
        int null = open("/dev/null", O_RDWR); /* as daemon(3) does */
        dup2(null, 0), dup2(null, 1), dup2(null, 2);
        truth[1].pid = (uint64_t)getpid();
        wait_for_go();
        allocate(1, mib());
        return 0;
    }
    if (!strcmp(mode, "setuid") || !strcmp(mode, "setuid-exec")) {
        pid_t c = fork(); /* first: the child inherits no live block of its parent */
        if (c < 0)
            return 5;
        if (c == 0) {
            drop_privileges();
            if (!strcmp(mode, "setuid-exec")) {
                execl("/proc/self/exe", argv[0], "alloc", "2", (char *)NULL);
                perror("survive: exec");
                _exit(6);
            }
            allocate(1, mib());
            return 0;
        }
        allocate(0, mib());
        int st = 0;
        waitpid(c, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 7;
    }
    return 2;
}
