/* base/fmt.c (digits, the line builder), base/out.c (the buffered writer, path escaping) and the
 * printf subset of base/log.c: the text every dump, log line and control reply is made of, checked
 * against stdio's own formatting. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include "../../src/base/fmt.h"
#include "../../src/base/log.h"
#include "../../src/base/out.h"
#include "unit.h"

/* Values that exercise every digit count and the edges. */
static uint64_t interesting(struct unit_rng *r, int i)
{
    static const uint64_t edges[] = {0, 1, 9, 10, 15, 16, 99, 100, 255, 256, 65535, 65536,
                                     999999999, 1000000000, 4294967295u, 4294967296u,
                                     9223372036854775807u, 9223372036854775808u,
                                     18446744073709551615u, 18446744073709551614u, 10000000000000000000u};
    if (i < (int)(sizeof edges / sizeof *edges))
        return edges[i];
    uint64_t v = unit_next(r);
    return v >> unit_below(r, 64); /* every magnitude, not mostly 20-digit numbers */
}

TEST(u64_and_hex_match_printf)
{
    struct unit_rng r = {0x1234567};
    for (int i = 0; i < 200000; i++) {
        uint64_t v = interesting(&r, i);
        char got[ML_FMT_MAX + 8], want[64];
        memset(got, 'Z', sizeof got);
        size_t n = ml_fmt_u64(got, v, 0);
        snprintf(want, sizeof want, "%" PRIu64, v);
        CHECK_STR(got, want);
        CHECK_EQ(n, strlen(want));
        n = ml_fmt_hex(got, v);
        snprintf(want, sizeof want, "0x%" PRIx64, v);
        CHECK_STR(got, want);
        CHECK_EQ(n, strlen(want));
        int width = (int)unit_below(&r, 21);
        n = ml_fmt_u64(got, v, width);
        snprintf(want, sizeof want, "%0*" PRIu64, width, v);
        CHECK_STR(got, want);
        CHECK_EQ(n, strlen(want));
        if (unit_failed_checks)
            return;
    }
}

TEST(widest_values_fit_the_buffer)
{
    /* ML_FMT_MAX is the caller's promise: the widest number and "0x" + 16 digits, with the NUL. */
    char buf[ML_FMT_MAX];
    CHECK_EQ(ml_fmt_u64(buf, UINT64_MAX, 20), 20);
    CHECK_STR(buf, "18446744073709551615");
    CHECK_EQ(ml_fmt_u64(buf, 7, 20), 20);
    CHECK_STR(buf, "00000000000000000007");
    CHECK_EQ(ml_fmt_hex(buf, UINT64_MAX), 18);
    CHECK_STR(buf, "0xffffffffffffffff");
}

TEST(line_builder_cuts_and_terminates)
{
    char small[8];
    struct ml_buf b = {small, 0, sizeof small};
    ml_buf_str(&b, "ok");
    ml_buf_kv(&b, "n", 12345);
    /* "ok n=12345" cut to cap - 1 bytes, always NUL-terminated */
    CHECK_STR(small, "ok n=12");
    CHECK_EQ(b.len, 7);
    ml_buf_str(&b, "more");
    CHECK_STR(small, "ok n=12");
    char one[1];
    struct ml_buf e = {one, 0, 1};
    ml_buf_u64(&e, 99);
    CHECK_EQ(one[0], 0);
    char big[128];
    struct ml_buf f = {big, 0, sizeof big};
    ml_buf_str(&f, "ok");
    ml_buf_kv(&f, "samples", 0);
    ml_buf_kv(&f, "cost_ns", UINT64_MAX);
    CHECK_STR(big, "ok samples=0 cost_ns=18446744073709551615");
    CHECK_EQ(f.len, strlen(big));
}

/* Everything an ml_out wrote to a temporary file, as a NUL-terminated string. */
static char *written(int fd, size_t *len)
{
    off_t size = lseek(fd, 0, SEEK_END);
    char *s = malloc((size_t)size + 1);
    ssize_t got = pread(fd, s, (size_t)size, 0);
    s[got < 0 ? 0 : got] = 0;
    *len = got < 0 ? 0 : (size_t)got;
    return s;
}

static int temp_fd(void)
{
    char name[] = "/tmp/memlens-unit-XXXXXX";
    int fd = mkstemp(name);
    unlink(name);
    return fd;
}

TEST(writer_escapes_paths_and_formats_numbers)
{
    static struct ml_out o; /* 4 KiB buffer: static, as the runtime keeps it */
    o.fd = temp_fd();
    o.err = 0;
    o.n = 0;
    ml_out_path(&o, "/a b/\\c\nd\x01\x1f\x7f\xff\xc3\xa9.so");
    ml_out_str(&o, "|");
    ml_out_i64(&o, INT64_MIN);
    ml_out_str(&o, "|");
    ml_out_i64(&o, -1);
    ml_out_str(&o, "|");
    ml_out_i64(&o, INT64_MAX);
    ml_out_str(&o, "|");
    ml_out_hex(&o, 0);
    ml_out_path(&o, "");
    ml_out_flush(&o);
    size_t len;
    char *s = written(o.fd, &len);
    /* control bytes, DEL and '\' as \xHH; bytes >= 0x80 (UTF-8, or not) as they are */
    CHECK_STR(s, "/a b/\\x5cc\\x0ad\\x01\\x1f\\x7f\xff\xc3\xa9.so|-9223372036854775808|-1|"
                 "9223372036854775807|0x0");
    CHECK_EQ(o.err, 0);
    free(s);
    close(o.fd);
}

TEST(writer_flushes_across_its_buffer_and_reports_errors)
{
    static struct ml_out o;
    o.fd = temp_fd();
    o.err = 0;
    o.n = 0;
    /* 3 x 4096 + a bit, in pieces that straddle the buffer's end, and one path longer than it */
    static char piece[1000], path[9000];
    memset(piece, 'a', sizeof piece - 1);
    for (size_t i = 0; i < sizeof path - 1; i++)
        path[i] = i % 97 == 0 ? '\n' : (char)('a' + i % 26);
    size_t want = 0, newlines = 0;
    for (int i = 0; i < 13; i++) {
        ml_out_str(&o, piece);
        want += sizeof piece - 1;
    }
    ml_out_path(&o, path);
    for (size_t i = 0; i < sizeof path - 1; i++)
        newlines += path[i] == '\n';
    want += sizeof path - 1 + 3 * newlines;
    ml_out_flush(&o);
    size_t len;
    char *s = written(o.fd, &len);
    CHECK_EQ(len, want);
    CHECK_EQ(o.err, 0);
    free(s);
    close(o.fd);
    /* a write that fails is remembered (the dump reports it), and nothing more is attempted */
    int p[2];
    CHECK(pipe(p) == 0);
    close(p[0]);
    signal(SIGPIPE, SIG_IGN);
    o.fd = p[1];
    o.err = 0;
    o.n = 0;
    ml_out_str(&o, "lost");
    ml_out_flush(&o);
    CHECK_EQ(o.err, EPIPE);
    CHECK_EQ(o.n, 0);
    close(p[1]);
}

/* What ml_log printed: fd 2 is sent to a file for the call. ml_log writes to fd 2 only while it is the
 * file it was at ml_log_init (a daemon's own file opened as fd 2 gets none of our lines), so the file
 * is made the one it knows, unless `adopt` is 0. */
static char *logged_to(void (*call)(void *), void *arg, int adopt)
{
    fflush(stderr);
    int saved = dup(2), fd = temp_fd();
    dup2(fd, 2);
    if (adopt)
        ml_log_init();
    call(arg);
    dup2(saved, 2);
    close(saved);
    ml_log_init();
    size_t len;
    char *s = written(fd, &len);
    close(fd);
    return s;
}

static char *logged(void (*call)(void *), void *arg) { return logged_to(call, arg, 1); }

struct nums {
    int i;
    long l;
    long long ll;
    size_t z;
    ssize_t sz;
    unsigned u;
    unsigned long ul;
    const char *s;
    void *p;
    char c;
};

static void log_nums(void *arg)
{
    const struct nums *n = arg;
    ml_log("d=%d i=%i ld=%ld lld=%lld zu=%zu zd=%zd u=%u lu=%lu x=%x lx=%lx zx=%zx o=%o lo=%lo s=%s c=%c "
           "p=%p %%",
           n->i, n->i, n->l, n->ll, n->z, n->sz, n->u, n->ul, n->u, n->ul, n->z, n->u, n->ul, n->s, n->c,
           n->p);
}

TEST(log_subset_matches_printf)
{
    struct unit_rng r = {42};
    for (int k = 0; k < 3000; k++) {
        struct nums n = {
            .i = (int)unit_next(&r), .l = (long)unit_next(&r) >> unit_below(&r, 63),
            .ll = (long long)unit_next(&r), .z = (size_t)unit_next(&r) >> unit_below(&r, 64),
            .sz = (ssize_t)unit_next(&r) >> unit_below(&r, 63), .u = (unsigned)unit_next(&r),
            .ul = (unsigned long)unit_next(&r), .s = k % 2 ? "/plain/path" : "", .p = (void *)(uintptr_t)unit_next(&r),
            .c = (char)('!' + k % 90),
        };
        if (k == 0) {
            n.i = INT_MIN;
            n.l = LONG_MIN;
            n.ll = LLONG_MIN;
            n.sz = -1;
            n.u = UINT_MAX;
            n.ul = ULONG_MAX;
            n.z = SIZE_MAX;
            n.p = (void *)1;
        }
        char want[1024], c[8] = {n.c, 0};
        if (n.c == '\\')
            strcpy(c, "\\x5c"); /* %c is escaped as %s is */
        snprintf(want, sizeof want,
                 "memlens: d=%d i=%i ld=%ld lld=%lld zu=%zu zd=%zd u=%u lu=%lu x=%x lx=%lx zx=%zx o=%o lo=%lo "
                 "s=%s c=%s p=0x%lx %%\n",
                 n.i, n.i, n.l, n.ll, n.z, n.sz, n.u, n.ul, n.u, n.ul, n.z, n.u, n.ul, n.s, c,
                 (unsigned long)(uintptr_t)n.p);
        char *got = logged(log_nums, &n);
        CHECK_STR(got, want);
        free(got);
        if (unit_failed_checks)
            return;
    }
}

static void log_errno(void *arg)
{
    errno = *(int *)arg;
    ml_log("cannot open %s: %m", "/x\ny");
}

static void log_bad(void *arg)
{
    (void)arg;
    /* not in the subset: shown as %?, never read as an argument */
    const char *fmt = "a %q b %";
    ml_log(fmt, 0);
}

TEST(log_errno_escapes_and_keeps_errno)
{
    int e = ENOENT;
    char *got = logged(log_errno, &e);
    CHECK_STR(got, "memlens: cannot open /x\\x0ay: No such file or directory (errno 2 ENOENT)\n");
    free(got);
    CHECK_EQ(errno, ENOENT); /* a message never changes what the caller tests next */
    e = 4000; /* no such errno: a description all the same */
    got = logged(log_errno, &e);
    CHECK(strstr(got, "(errno 4000") != NULL);
    free(got);
    got = logged(log_bad, NULL);
    CHECK_STR(got, "memlens: a %? b %\n");
    free(got);
}

TEST(log_never_writes_to_an_fd_2_it_did_not_start_with)
{
    ml_log_init(); /* fd 2 as the test started: known */
    int e = ENOENT;
    char *got = logged_to(log_errno, &e, 0); /* the program's own file now holds fd 2 */
    CHECK_STR(got, "");
    free(got);
}
