/* A root daemon that drops to another uid while keeping capabilities, the way setpriv and many
 * services do (issue 29, item 4): PR_SET_KEEPCAPS -> setresuid -> capset (CAP_SETGID and CAP_SETUID
 * effective again) -> setresgid -> setgroups. glibc applies each set*id call to every thread of the
 * process and aborts when one thread's call fails: a thread that did not keep the capabilities
 * (a profiler's) fails the setresgid.
 *
 *   keepcaps_daemon READY_FILE GO_FILE UID [HOLD_FILE]
 * Allocates in a loop, writes READY_FILE, waits until GO_FILE exists (so that `memlens attach` can
 * come in first), drops to UID (as gid UID too), allocates again and prints
 * "dropped uid=U gid=G caps=0x…"; with HOLD_FILE it then goes on allocating until that file exists
 * (so that its threads can be looked at), and exits 0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static void churn(int n)
{
    for (int i = 0; i < n; i++) {
        char *p = malloc(1000 + (size_t)(i % 7) * 4096);
        memset(p, i, 16);
        free(p);
    }
}

static int caps_effective(unsigned mask)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        return -1;
    d[0].effective |= mask;
    return (int)syscall(SYS_capset, &h, d);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: keepcaps_daemon READY_FILE GO_FILE UID\n");
        return 2;
    }
    uid_t uid = (uid_t)atoi(argv[3]);
    churn(20000);
    close(open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644));
    while (access(argv[2], F_OK) != 0) {
        churn(200);
        usleep(10000);
    }
    unsigned keep = (1u << CAP_SETGID) | (1u << CAP_SETUID);
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 || setresuid(uid, uid, uid) != 0 ||
        caps_effective(keep) != 0 || setresgid(uid, uid, uid) != 0 || setgroups(0, NULL) != 0) {
        perror("keepcaps_daemon: dropping privileges");
        return 1;
    }
    churn(20000);
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    syscall(SYS_capget, &h, d);
    printf("dropped uid=%u gid=%u caps=0x%x\n", (unsigned)geteuid(), (unsigned)getegid(), d[0].effective);
    fflush(stdout);
    while (argc > 4 && access(argv[4], F_OK) != 0) {
        churn(200);
        usleep(10000);
    }
    return 0;
}
