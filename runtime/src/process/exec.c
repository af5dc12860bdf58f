/* exec: the new image starts a fresh runtime (same pid), so dump what this image collected first.
 * If the exec fails the process goes on with this runtime, so the dump is removed again (it would
 * otherwise be counted twice, once here and once at exit). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../control/dump.h"
#include "../store/stacks.h"
#include "../store/state.h"

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execvp_fn)(const char *, char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

/* Will exec of `file` (searched in PATH when `search` and it has no '/') find a program? Programs
 * that search PATH themselves try execve on every directory: only the attempt that can succeed is
 * worth a dump. */
static int runnable(const char *file, int search)
{
    if (!file || !*file)
        return 0;
    if (!search || strchr(file, '/'))
        return access(file, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin";
    size_t flen = strlen(file);
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t dlen = end ? (size_t)(end - p) : strlen(p);
        char buf[512];
        if (dlen + flen + 2 <= sizeof buf) {
            memcpy(buf, dlen ? p : ".", dlen ? dlen : 1);
            size_t at = dlen ? dlen : 1;
            buf[at++] = '/';
            memcpy(buf + at, file, flen + 1);
            if (access(buf, X_OK) == 0)
                return 1;
        } else {
            return 1; /* cannot tell: dump rather than lose the profile */
        }
        if (!end)
            return 0;
        p = end;
    }
}

/* Returns 1 and sets *which if a dump was written. A forked child that has sampled nothing since
 * the fork has nothing of its own to say (what it inherited is in its parent's profile). */
static int before_exec(const char *file, int search, uint64_t *which)
{
    if (!ml_cfg.out || !ml_cfg.ready || atomic_load(&ml_cfg.failed))
        return 0;
    if ((int64_t)getpid() != ml_cfg.pid) /* vfork child: the profile is the parent's */
        return 0;
    if (!runnable(file, search))
        return 0;
    if (ml_cfg.is_fork_child) {
        uint64_t samples = 0, bytes;
        if (!ml_state_table_inherited())
            ml_stacks_totals(&samples, &bytes);
        if (!samples) {
            ml_state_final(ML_SEQ_NOTHING); /* the state file: replaced, nothing of its own */
            return 0;
        }
    }
    int r = ml_dump_auto_seq("exec", which) == 0;
    if (r)
        ml_state_final(*which);
    return r;
}

static void after_failed_exec(int dumped, uint64_t which)
{
    int e = errno;
    if (dumped)
        ml_dump_auto_remove(which);
    if ((int64_t)getpid() == ml_cfg.pid && ml_cfg.out)
        ml_state_final(~0ull); /* this image goes on */
    errno = e;
}

ML_EXPORT int execve(const char *file, char *const argv[], char *const envp[])
{
    static execve_fn real;
    if (!real)
        real = (execve_fn)next("execve");
    uint64_t which = 0;
    int d = before_exec(file, 0, &which);
    int r = real(file, argv, envp);
    after_failed_exec(d, which);
    return r;
}

ML_EXPORT int execv(const char *file, char *const argv[])
{
    extern char **environ;
    return execve(file, argv, environ);
}

ML_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    static execvpe_fn real;
    if (!real)
        real = (execvpe_fn)next("execvpe");
    uint64_t which = 0;
    int d = before_exec(file, 1, &which);
    int r = real(file, argv, envp);
    after_failed_exec(d, which);
    return r;
}

ML_EXPORT int execvp(const char *file, char *const argv[])
{
    extern char **environ;
    return execvpe(file, argv, environ);
}

/* The execl family: count the variadic arguments, then collect them into an array of exactly that
 * size on the stack, as glibc does (a fixed array would cost 32 KiB of stack, too much for a
 * sigaltstack, and cap the count). */
static size_t count_args(const char *arg0, va_list ap)
{
    size_t n = 1;
    for (const char *a = arg0; a; a = va_arg(ap, const char *))
        n++;
    return n; /* the NULL included */
}

static void collect(const char *arg0, va_list ap, char **argv, size_t n)
{
    argv[0] = (char *)arg0;
    for (size_t i = 1; i < n; i++)
        argv[i] = va_arg(ap, char *);
}

ML_EXPORT int execl(const char *file, const char *arg, ...)
{
    extern char **environ;
    va_list ap;
    va_start(ap, arg);
    size_t n = count_args(arg, ap);
    va_end(ap);
    char *argv[n];
    va_start(ap, arg);
    collect(arg, ap, argv, n);
    va_end(ap);
    return execve(file, argv, environ);
}

ML_EXPORT int execlp(const char *file, const char *arg, ...)
{
    extern char **environ;
    va_list ap;
    va_start(ap, arg);
    size_t n = count_args(arg, ap);
    va_end(ap);
    char *argv[n];
    va_start(ap, arg);
    collect(arg, ap, argv, n);
    va_end(ap);
    return execvpe(file, argv, environ);
}

ML_EXPORT int execle(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    size_t n = count_args(arg, ap);
    va_end(ap);
    char *argv[n];
    va_start(ap, arg);
    collect(arg, ap, argv, n);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(file, argv, envp);
}
