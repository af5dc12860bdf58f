/* The runtime's own descriptors (fd.c): kept at high numbers and checked to be still ours before
 * every use, so that the program's descriptors are never touched. */
#ifndef MEMLENS_FD_H
#define MEMLENS_FD_H
#include <sys/types.h>

#include "rt.h"

#pragma GCC visibility push(hidden)

/* A descriptor the runtime keeps: its number and what it was when we took it (st_dev, st_ino). */
struct ml_fd {
    int fd; /* -1: none */
    dev_t dev;
    ino_t ino;
};
#define ML_FD_NONE {-1, 0, 0}

/* The lowest number the runtime keeps its descriptors at (fd.c says how it is chosen). */
int ml_fd_floor(void);
/* Move `fd` (just opened by us) to a number at or above the floor, close-on-exec; returns the new
 * number, or `fd` itself when no higher number is free (it is then checked like any other). */
int ml_fd_high(int fd);
/* Keep `fd` (just opened by us) in f, moved high; returns the number, or -1 (fd closed) when it
 * cannot be identified. */
int ml_fd_adopt(struct ml_fd *f, int fd);
/* The number, if it is still the descriptor we took; otherwise -1, and f forgets the number (not
 * what the file was, so that it can be opened again and recognised): the program closed ours and
 * the number may be one of its own files now, which we must never use nor close. */
int ml_fd_get(struct ml_fd *f);
/* Close it if it is still ours; forget it (and what it was) either way. */
void ml_fd_close(struct ml_fd *f);
/* open(2) for the runtime's own use, moved high. -1 and errno on failure. */
int ml_open_high(const char *path, int flags, mode_t mode);
/* Is descriptor `fd` the file (dev, ino)? */
int ml_fd_is(int fd, dev_t dev, ino_t ino);

#pragma GCC visibility pop
#endif
