/* The runtime's own descriptors: the control socket and its connections, the state file and run
 * directory, /proc/self/statm, a dump being written. Rules (issue 29):
 *
 *  - They live at high numbers (F_DUPFD_CLOEXEC from a floor near the top of the usual 1024), so a
 *    program that closes what it did not open and opens its own files gets the low numbers, as it
 *    would without us, and a program that dup2()s onto a number it chose rarely meets one of ours.
 *  - Each is checked to be still ours (st_dev and st_ino, taken when we opened it) before every use:
 *    a daemon that closes every descriptor closes ours too, and the number may then be its own TCP
 *    socket or log file. A descriptor found closed is forgotten, never used nor closed again; the
 *    feature that needed it opens a new one or stops quietly.
 *
 * The floor is min(RLIMIT_NOFILE, 1024) - 64 (half the limit under 128): not at the top of a large
 * limit, because the kernel sizes a process's descriptor table to its highest open number and
 * copies it at every fork (a descriptor at 1048000 would cost each process 8 MiB of kernel memory).
 * A short window is left, between open(2) and the move, where the descriptor has a low number; the
 * same window every libc function that opens a file has. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd.h"

int ml_fd_floor(void)
{
    struct rlimit rl;
    uint64_t lim = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < lim)
        lim = rl.rlim_cur;
    return lim >= 128 ? (int)lim - 64 : (int)lim / 2;
}

int ml_fd_high(int fd)
{
    if (fd < 0)
        return fd;
    int floor = ml_fd_floor();
    if (fd >= floor)
        return fd;
    int e = errno;
    int h = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    errno = e;
    if (h < 0)
        return fd; /* every number above the floor is taken (or the limit is lower now): keep it */
    close(fd);
    return h;
}

int ml_fd_is(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

int ml_fd_adopt(struct ml_fd *f, int fd)
{
    struct stat st;
    f->fd = -1;
    f->dev = 0;
    f->ino = 0;
    if (fd < 0)
        return -1;
    fd = ml_fd_high(fd);
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->fd = fd;
    return fd;
}

int ml_fd_get(struct ml_fd *f)
{
    int fd = f->fd;
    if (fd < 0)
        return -1;
    int e = errno;
    int ok = ml_fd_is(fd, f->dev, f->ino);
    errno = e;
    if (ok)
        return fd;
    f->fd = -1; /* closed by the program: the number is not ours any more */
    return -1;
}

void ml_fd_close(struct ml_fd *f)
{
    int fd = ml_fd_get(f);
    if (fd >= 0)
        close(fd);
    f->fd = -1;
    f->dev = 0;
    f->ino = 0;
}

int ml_open_high(const char *path, int flags, mode_t mode)
{
    return ml_fd_high(open(path, flags | O_CLOEXEC, mode));
}
