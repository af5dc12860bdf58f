/* A stand-in for a pre-fork server (postgres, nginx, apache, gunicorn): the parent forks workers on
 * demand, and a worker waits in read() for work that never comes, never calling malloc (a postgres
 * backend idle in recv() may not for minutes). tests/e2e/reach.rs drives it on stdin:
 *   "fork\n"  the parent forks a worker, which writes "child PID\n" (with write(2): no stdio, no
 *             malloc) and blocks reading a pipe;
 *   "quit\n"  the parent closes the pipe (every worker's read returns 0 and it _exits 0), reaps them
 *             and exits 0.
 * The parent writes "ready PID\n" first. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* "<word> <n>\n" into out without stdio (no allocation in the worker). */
static size_t say(char *out, const char *word, long n)
{
    char digits[24];
    int k = 0;
    do {
        digits[k++] = (char)('0' + n % 10);
        n /= 10;
    } while (n && k < (int)sizeof digits);
    size_t len = strlen(word);
    memcpy(out, word, len);
    out[len++] = ' ';
    while (k)
        out[len++] = digits[--k];
    out[len++] = '\n';
    return len;
}

static void worker(int rd)
{
    char b[64];
    size_t n = say(b, "child", (long)getpid());
    if (write(1, b, n) != (ssize_t)n)
        _exit(1);
    while (read(rd, b, sizeof b) > 0)
        ;
    _exit(0);
}

int main(void)
{
    int p[2];
    if (pipe(p) != 0)
        return 1;
    printf("ready %ld\n", (long)getpid());
    fflush(stdout);
    char line[64];
    int kids = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "fork\n") == 0) {
            pid_t c = fork();
            if (c == 0) {
                close(p[1]);
                worker(p[0]);
            }
            if (c > 0)
                kids++;
        } else if (strcmp(line, "quit\n") == 0) {
            break;
        }
    }
    close(p[1]);
    while (kids-- > 0)
        wait(NULL);
    return 0;
}
