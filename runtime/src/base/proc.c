/* Small /proc files read without stdio or malloc: safe inside malloc, in a fork child and in a signal
 * handler. The runtime reads its own stat, its threads' stat and statm this way. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

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
