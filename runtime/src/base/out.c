/* A tiny buffered writer for dumps and log lines. The runtime never uses stdio or snprintf while
 * dumping: both may allocate, and a dump can run inside a fork child or an exec interposer. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd.h"
#include "fmt.h"
#include "out.h"

int ml_out_own(struct ml_out *o, int fd)
{
    struct stat st;
    o->fd = fd;
    o->n = 0;
    o->own = 1;
    o->err = fstat(fd, &st) == 0 ? 0 : errno;
    o->dev = st.st_dev;
    o->ino = st.st_ino;
    return o->err ? -1 : 0;
}

void ml_out_flush(struct ml_out *o)
{
    size_t done = 0;
    if (o->n && !o->err && o->own && !ml_fd_is(o->fd, o->dev, o->ino))
        o->err = EBADF; /* not ours any more: not a byte goes into the program's file */
    while (done < o->n && !o->err) {
        ssize_t w = write(o->fd, o->buf + done, o->n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            o->err = w < 0 ? errno : EIO;
        else
            done += (size_t)w;
    }
    o->n = 0;
}

static void out_bytes(struct ml_out *o, const char *s, size_t len)
{
    while (len) {
        if (o->n == sizeof o->buf)
            ml_out_flush(o);
        size_t k = sizeof o->buf - o->n;
        if (k > len)
            k = len;
        memcpy(o->buf + o->n, s, k);
        o->n += k;
        s += k;
        len -= k;
    }
}

void ml_out_str(struct ml_out *o, const char *s) { out_bytes(o, s, strlen(s)); }

/* A path in a dump: control bytes (a newline would start a forged record) and the backslash are
 * written as \xHH; every other byte as it is (the reader takes non-UTF-8 bytes as they come). */
void ml_out_path(struct ml_out *o, const char *s)
{
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c && c >= 0x20 && c != 0x7f && c != '\\')
            continue;
        out_bytes(o, run, (size_t)(s - run));
        if (!c)
            return;
        char esc[4] = {'\\', 'x', "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]};
        out_bytes(o, esc, sizeof esc);
        run = s + 1;
    }
}

void ml_out_u64(struct ml_out *o, uint64_t v)
{
    char tmp[ML_FMT_MAX];
    out_bytes(o, tmp, ml_fmt_u64(tmp, v, 0));
}

void ml_out_i64(struct ml_out *o, int64_t v)
{
    if (v < 0) {
        out_bytes(o, "-", 1);
        ml_out_u64(o, (uint64_t)0 - (uint64_t)v);
    } else {
        ml_out_u64(o, (uint64_t)v);
    }
}

void ml_out_hex(struct ml_out *o, uint64_t v)
{
    char tmp[ML_FMT_MAX];
    out_bytes(o, tmp, ml_fmt_hex(tmp, v));
}
