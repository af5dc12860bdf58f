/* A small buffered writer for dumps and log lines, no stdio, no malloc (out.c). */
#ifndef MEMLENS_OUT_H
#define MEMLENS_OUT_H
#include <sys/types.h>

#include "rt.h"

#pragma GCC visibility push(hidden)

/* `fd` is written only while it is the file (dev, ino) the writer was given (ml_out_own), else the
 * writer stops with err = EBADF: the program may have closed our descriptor and reused its number. */
struct ml_out {
    int fd;
    int err;
    int own;   /* check (dev, ino) before each write */
    dev_t dev;
    ino_t ino;
    size_t n;
    char buf[4096];
};
/* Start writing to `fd`, which must stay the file it is now. 0, or -1 (err set) if fstat fails. */
int ml_out_own(struct ml_out *o, int fd);
void ml_out_str(struct ml_out *o, const char *s);
void ml_out_path(struct ml_out *o, const char *s);
void ml_out_u64(struct ml_out *o, uint64_t v);
void ml_out_i64(struct ml_out *o, int64_t v);
void ml_out_hex(struct ml_out *o, uint64_t v);
void ml_out_flush(struct ml_out *o);

#pragma GCC visibility pop
#endif
