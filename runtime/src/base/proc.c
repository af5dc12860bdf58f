/* Small /proc files read without stdio or malloc: safe inside malloc, in a fork child and in a signal
 * handler. The runtime reads its own stat, its threads' stat and statm this way. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "fmt.h"
#include "proc.h"

ssize_t ml_proc_read(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return n;
}

const char *ml_proc_after_comm(const char *stat)
{
    const char *p = strrchr(stat, ')');
    return p ? p + 1 : NULL;
}

char ml_proc_task_state(const char *tid)
{
    char path[64];
    struct ml_buf b = {path, 0, sizeof path};
    ml_buf_str(&b, "/proc/self/task/");
    ml_buf_str(&b, tid);
    ml_buf_str(&b, "/stat");
    char s[512];
    const char *f = ml_proc_read(path, s, sizeof s) > 0 ? ml_proc_after_comm(s) : NULL;
    return f && f[0] == ' ' ? f[1] : 0;
}

char ml_proc_main_state(void)
{
    char pid[ML_FMT_MAX];
    ml_fmt_u64(pid, (uint64_t)getpid(), 0);
    return ml_proc_task_state(pid);
}
