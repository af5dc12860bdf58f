/* Small /proc files read without stdio or malloc (proc.c). */
#ifndef MEMLENS_PROC_H
#define MEMLENS_PROC_H
#include <sys/types.h>

#include "rt.h"

#pragma GCC visibility push(hidden)

/* Read up to cap - 1 bytes of `path` into buf, NUL-terminated; the length read, or -1 when the file
 * cannot be opened or read or is empty. */
ssize_t ml_proc_read(const char *path, char *buf, size_t cap);
/* In the text of a stat file (/proc/…/stat), the fields after the command name: the command may hold
 * spaces and parentheses, so it ends at the last ')'. NULL when there is none. */
const char *ml_proc_after_comm(const char *stat);
/* The state letter (R, S, Z, …) of task `tid` of this process, or of its main thread; 0 if it cannot
 * be read (the task is gone). */
char ml_proc_task_state(const char *tid);
/* The main thread's, from a descriptor kept open for the runtime's thread (the only caller). */
char ml_proc_main_state(void);
/* The resident set in bytes from the text of /proc/self/statm (its second field, in pages). */
int64_t ml_proc_statm_rss(const char *statm);
/* The resident set in bytes (-1 unknown), for the runtime's thread only (one descriptor of its own). */
int64_t ml_proc_rss_own(void);
struct ml_fd;
/* The resident set in bytes (-1 unknown) from /proc/self/statm kept open in *statm (opened when it is
 * not ours), read with pread; the caller serialises its uses. */
int64_t ml_proc_rss_at(struct ml_fd *statm);

/* Is the process under a seccomp filter (Seccomp: 1 or 2 in /proc/self/status)? Then the runtime keeps
 * to its minimal set of system calls (runtime/README.md): no libunwind, no process_vm_readv. The
 * answer is cached; ml_seccomp_refresh reads it again (at start-up, and once a second from the
 * runtime's thread: a program may install a filter late, as sshd's privilege-separated child
 * does), returning the mode (-1 unknown). */
int ml_seccomp_filtered(void);
int ml_seccomp_refresh(void);
/* Fork child: the descriptors the parent kept for its own /proc files are closed (reopened later). */
void ml_proc_fork_child(void);

#pragma GCC visibility pop
#endif
