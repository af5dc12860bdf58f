/* Messages on stderr (log.h), and the internal failure that stops profiling. The bottom floor:
 * nothing here calls into the runtime beyond the malloc-free writer (out.c), so any file may log,
 * at any time: inside malloc, inside ml_init, in a fork child, from _exit.
 *
 * The format is the subset of printf the runtime needs, checked by the compiler (ML_PRINTF):
 *   %s  a string, control bytes and '\' as \xHH (a path with a newline cannot break the line)
 *   %d %i %u %x %o  with the length modifiers l, ll, z (%x without "0x": write 0x%zx)
 *   %c  a byte     %p  an address, 0x...     %%  a percent sign
 *   %m  the errno the caller had, as "<description> (errno N ENAME)"
 * Not stdio: vsnprintf may allocate (locale, wide strings) and takes locks; strerror may allocate
 * too (its unknown-error buffer), and its text follows the locale. strerrordesc_np and
 * strerrorname_np (glibc 2.32; the runtime already needs 2.35) return constant, untranslated
 * strings and are async-signal-safe.
 *
 * Messages go to fd 2 only while it is the file it was when the runtime started (ml_log_init): a
 * daemon that closed its stderr and opened a log file or a socket as fd 2 gets none of our lines.
 * Not a dup of fd 2 taken at start: a descriptor we kept would hold the program's stderr pipe open,
 * and a parent that waits for EOF on it (a shell's $(…), a supervisor that watches a daemon detach)
 * would wait forever. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "fmt.h"
#include "log.h"
#include "out.h"

static void put_errno(struct ml_out *o, int err)
{
    const char *desc = strerrordesc_np(err), *name = strerrorname_np(err);
    ml_out_str(o, desc ? desc : "unknown error");
    ml_out_str(o, " (errno ");
    ml_out_i64(o, err);
    if (name) {
        ml_out_str(o, " ");
        ml_out_str(o, name);
    }
    ml_out_str(o, ")");
}

/* One conversion: the argument of length `len` (0 int, 1 long, 2 long long, 3 size_t). */
static void put_arg(struct ml_out *o, char conv, int len, va_list *ap)
{
    char tmp[ML_FMT_MAX];
    if (conv == 'd' || conv == 'i') {
        int64_t v = len == 0 ? va_arg(*ap, int) : len == 1 ? va_arg(*ap, long)
                  : len == 2 ? va_arg(*ap, long long) : (int64_t)va_arg(*ap, ssize_t);
        ml_out_i64(o, v);
        return;
    }
    uint64_t v = len == 0 ? va_arg(*ap, unsigned) : len == 1 ? va_arg(*ap, unsigned long)
               : len == 2 ? va_arg(*ap, unsigned long long) : va_arg(*ap, size_t);
    if (conv == 'u') {
        ml_out_u64(o, v);
    } else if (conv == 'x') {
        ml_fmt_hex(tmp, v);
        ml_out_str(o, tmp + 2);
    } else { /* 'o': file modes */
        int n = ML_FMT_MAX - 1;
        tmp[n] = 0;
        do {
            tmp[--n] = (char)('0' + (v & 7));
            v >>= 3;
        } while (v);
        ml_out_str(o, tmp + n);
    }
}

/* fd 2 as it was at start-up; stderr_known 0: it was closed then, and nothing is ever written. */
static dev_t stderr_dev;
static ino_t stderr_ino;
static int stderr_known;

void ml_log_init(void)
{
    struct stat st;
    int e = errno;
    stderr_known = fstat(2, &st) == 0;
    stderr_dev = st.st_dev;
    stderr_ino = st.st_ino;
    errno = e;
}

static void vlog(const char *fmt, va_list ap, int err)
{
    if (!stderr_known)
        return;
    struct ml_out o = {.fd = 2, .own = 1, .dev = stderr_dev, .ino = stderr_ino};
    va_list aq;
    va_copy(aq, ap);
    ml_out_str(&o, "memlens: ");
    for (const char *f = fmt; *f; f++) {
        if (*f != '%' || !f[1]) {
            char c[2] = {*f, 0};
            ml_out_str(&o, c);
            continue;
        }
        int len = 0;
        for (f++; *f == 'l' || *f == 'z'; f++)
            len = *f == 'z' ? 3 : len + 1;
        switch (*f) {
        case 's': {
            const char *s = va_arg(aq, const char *);
            ml_out_path(&o, s ? s : "(null)");
            break;
        }
        case 'c': {
            char c[2] = {(char)va_arg(aq, int), 0};
            ml_out_path(&o, c);
            break;
        }
        case 'p':
            ml_out_hex(&o, (uintptr_t)va_arg(aq, void *));
            break;
        case 'm':
            put_errno(&o, err);
            break;
        case 'd': case 'i': case 'u': case 'x': case 'o':
            put_arg(&o, *f, len, &aq);
            break;
        case '%':
            ml_out_str(&o, "%");
            break;
        default: /* not in the subset (the compiler has checked the arguments): shown as written */
            ml_out_str(&o, "%?");
            if (!*f)
                f--;
        }
    }
    va_end(aq);
    ml_out_str(&o, "\n");
    ml_out_flush(&o);
}

void ml_log(const char *fmt, ...)
{
    int err = errno;
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap, err);
    va_end(ap);
    errno = err; /* a message never changes what the caller goes on to test */
}

void ml_fail(const char *fmt, ...)
{
    int err = errno;
    atomic_store(&ml_cfg.active, 0);
    if (!atomic_exchange(&ml_cfg.failed, 1)) {
        va_list ap;
        va_start(ap, fmt);
        vlog(fmt, ap, err);
        va_end(ap);
        ml_log("profiling stopped; the program continues");
    }
    errno = err;
}
