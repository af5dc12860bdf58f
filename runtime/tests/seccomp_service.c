/* What systemd does for a unit with SystemCallFilter= (issue 29, item 3): install a seccomp
 * allow-list with libseccomp, every other system call killing the process (SIGSYS), then exec the
 * service.
 *
 *   seccomp_service NAMES_FILE [-d NAME]... -- PROGRAM [ARGS...]
 * NAMES_FILE holds the allowed system calls, one per line (the test writes the expansion of
 * `systemd-analyze syscall-filter @system-service`); names this libseccomp does not know are
 * skipped. Each `-d NAME` removes a name from the list (a stricter unit). */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DENY 16

static int denied(const char *name, char **deny, int ndeny)
{
    for (int i = 0; i < ndeny; i++)
        if (!strcmp(deny[i], name))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    char *deny[MAX_DENY];
    int ndeny = 0, i = 2;
    for (; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "-d") && i + 1 < argc && ndeny < MAX_DENY)
            deny[ndeny++] = argv[++i];
    if (argc < 4 || i + 1 >= argc) {
        fprintf(stderr, "usage: seccomp_service NAMES_FILE [-d NAME]... -- PROGRAM [ARGS...]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
    if (!f || !ctx) {
        perror("seccomp_service");
        return 2;
    }
    char line[128];
    int allowed = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n \t")] = 0;
        int nr = line[0] ? seccomp_syscall_resolve_name(line) : __NR_SCMP_ERROR;
        if (nr == __NR_SCMP_ERROR || denied(line, deny, ndeny))
            continue;
        if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) == 0)
            allowed++;
    }
    fclose(f);
    int e = seccomp_load(ctx);
    if (e != 0) {
        fprintf(stderr, "seccomp_service: seccomp_load: %s\n", strerror(-e));
        return 2;
    }
    seccomp_release(ctx);
    execvp(argv[i + 1], argv + i + 1);
    fprintf(stderr, "seccomp_service: cannot run %s: %s\n", argv[i + 1], strerror(errno));
    return 127;
}
