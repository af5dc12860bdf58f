/* The control socket's directory and file (ctl_dir.c), for the thread that listens on it (ctl.c)
 * and the dumps it is asked for (ctl_proto.c). */
#ifndef MEMLENS_CTL_DIR_H
#define MEMLENS_CTL_DIR_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* Bind and listen on `<dir>/<pid>.<pidns>.sock` (non-blocking, close-on-exec). Returns the fd or -1
 * (the reason is logged unless `quiet`). */
int ml_ctl_listen(int quiet);
/* Remove the socket file, if this process bound it. */
void ml_ctl_unlink(void);
/* A fork child: the socket file is the parent's, never ours to remove. */
void ml_ctl_disown(void);
/* The socket directory (set by ml_ctl_listen; "" before): dumps asked for over the socket go there. */
const char *ml_ctl_dirpath(void);
/* The socket's path, for messages. */
const char *ml_ctl_path(void);
/* Is our uid mapped in our user namespace? Right after unshare(CLONE_NEWUSER), until the program
 * writes /proc/self/uid_map, it is not (nothing is made in the directory then). */
int ml_ctl_uid_mapped(void);

#pragma GCC visibility pop
#endif
