/* exec: the new image starts a fresh runtime (same pid), so dump what this image collected first.
 * If the exec fails the process goes on with this runtime, so the dump is removed again (it would
 * otherwise be counted twice, once here and once at exit). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

#include "rt.h"

#define MAX_ARGS 4096

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execvp_fn)(const char *, char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

/* Returns 1 and fills path if a dump was written. */
static int before_exec(char *path, size_t cap)
{
    if (!ml_cfg.out || !ml_cfg.ready || atomic_load(&ml_cfg.failed))
        return 0;
    if ((int64_t)getpid() != ml_cfg.pid) /* vfork child: the profile is the parent's */
        return 0;
    return ml_dump_auto_path("exec", path, cap) == 0;
}

static void after_failed_exec(int dumped, const char *path)
{
    if (dumped) {
        int e = errno;
        unlink(path);
        errno = e;
    }
}

ML_EXPORT int execve(const char *file, char *const argv[], char *const envp[])
{
    static execve_fn real;
    if (!real)
        real = (execve_fn)next("execve");
    char path[4096];
    int d = before_exec(path, sizeof path);
    int r = real(file, argv, envp);
    after_failed_exec(d, path);
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
    char path[4096];
    int d = before_exec(path, sizeof path);
    int r = real(file, argv, envp);
    after_failed_exec(d, path);
    return r;
}

ML_EXPORT int execvp(const char *file, char *const argv[])
{
    extern char **environ;
    return execvpe(file, argv, environ);
}

/* The execl family: collect the variadic arguments into an array on the stack. */
static int collect(const char *arg0, va_list ap, char **argv)
{
    int n = 0;
    argv[n++] = (char *)arg0;
    while (argv[n - 1]) {
        if (n == MAX_ARGS) {
            errno = E2BIG;
            return -1;
        }
        argv[n++] = va_arg(ap, char *);
    }
    return n;
}

ML_EXPORT int execl(const char *file, const char *arg, ...)
{
    extern char **environ;
    char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, arg);
    int n = collect(arg, ap, argv);
    va_end(ap);
    return n < 0 ? -1 : execve(file, argv, environ);
}

ML_EXPORT int execlp(const char *file, const char *arg, ...)
{
    extern char **environ;
    char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, arg);
    int n = collect(arg, ap, argv);
    va_end(ap);
    return n < 0 ? -1 : execvpe(file, argv, environ);
}

ML_EXPORT int execle(const char *file, const char *arg, ...)
{
    char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, arg);
    int n = collect(arg, ap, argv);
    char *const *envp = n < 0 ? NULL : va_arg(ap, char *const *);
    va_end(ap);
    return n < 0 ? -1 : execve(file, argv, envp);
}
