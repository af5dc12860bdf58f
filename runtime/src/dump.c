/* The raw dump (format: runtime/README.md). Written with write(2) from a stack buffer; never allocates
 * through malloc, so it is safe at exit, in a fork child and right before exec. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"
#include "views.h"

static _Atomic int dump_lock;
static _Atomic uint64_t seq;

void ml_dump_lock(void)
{
    while (atomic_exchange_explicit(&dump_lock, 1, memory_order_acquire))
        usleep(100);
}
void ml_dump_unlock(void) { ml_spin_unlock(&dump_lock); }
void ml_dump_lock_reset(void)
{
    atomic_store(&dump_lock, 0);
    atomic_store(&seq, 0);
}

static void line_u(struct ml_out *o, const char *key, uint64_t v)
{
    ml_out_str(o, key);
    ml_out_str(o, " ");
    ml_out_u64(o, v);
    ml_out_str(o, "\n");
}

static void line_s(struct ml_out *o, const char *key, const char *v)
{
    ml_out_str(o, key);
    ml_out_str(o, " ");
    ml_out_str(o, v);
    ml_out_str(o, "\n");
}

static void write_maps(struct ml_out *o)
{
    ml_out_str(o, "maps\n");
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[4096];
        int last_nl = 1;
        for (;;) {
            ssize_t r = read(fd, buf, sizeof buf - 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            buf[r] = 0;
            ml_out_str(o, buf); /* maps has no NUL bytes */
            last_nl = buf[r - 1] == '\n';
        }
        close(fd);
        if (!last_nl)
            ml_out_str(o, "\n");
    }
    ml_out_str(o, "end maps\n");
}

/* The header's `samples` must equal the sum of the stacks below even while other threads keep
 * sampling during the dump: write_stack adds up what it writes (under the dump lock) and write_dump
 * patches a fixed-width placeholder with that sum at the end. */
static uint64_t dump_samples;

static void write_stack(struct ml_stack *r, void *arg)
{
    struct ml_out *o = arg;
    uint64_t samples = atomic_load_explicit(&r->samples, memory_order_relaxed);
    int64_t inuse_fx = atomic_load_explicit(&r->inuse_fx, memory_order_relaxed);
    int64_t inuse_b = atomic_load_explicit(&r->inuse_bytes, memory_order_relaxed);
    if (!samples && !inuse_fx && !inuse_b)
        return; /* nothing since the last reset */
    dump_samples += samples;
    ml_out_str(o, "stack ");
    ml_out_u64(o, samples);
    ml_out_str(o, " ");
    ml_out_u64(o, atomic_load_explicit(&r->alloc_fx, memory_order_relaxed));
    ml_out_str(o, " ");
    ml_out_u64(o, atomic_load_explicit(&r->alloc_bytes, memory_order_relaxed));
    ml_out_str(o, " ");
    ml_out_i64(o, inuse_fx < 0 ? 0 : inuse_fx);
    ml_out_str(o, " ");
    ml_out_i64(o, inuse_b < 0 ? 0 : inuse_b);
    ml_out_str(o, " ");
    ml_out_u64(o, r->flags);
    for (uint32_t i = 0; i < r->depth; i++) {
        ml_out_str(o, " ");
        ml_out_hex(o, r->pcs[i]);
    }
    ml_out_str(o, "\n");
    ml_views_write_stack(o, r);
}

static void write_dump(struct ml_out *o, const char *reason)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    ml_out_str(o, "memlens-raw 1\n");
    line_u(o, "pid", (uint64_t)getpid());
    line_u(o, "ppid", (uint64_t)getppid());
    line_s(o, "exe", exe);
    line_u(o, "interval", atomic_load(&ml_cfg.interval));
    line_s(o, "unwinder", ml_unwinder_name(ml_cfg.unwinder));
    line_u(o, "active", (uint64_t)atomic_load(&ml_cfg.active));
    line_s(o, "reason", reason);
    line_u(o, "start_ns", atomic_load(&ml_cfg.start_ns));
    line_u(o, "time_ns", ml_now_ns());
    ml_out_str(o, "samples ");
    off_t samples_at = lseek(o->fd, 0, SEEK_CUR) + (off_t)o->n;
    ml_out_str(o, "00000000000000000000\n");
    line_u(o, "truncated", atomic_load(&ml_cfg.truncated));
    line_u(o, "dropped", atomic_load(&ml_cfg.dropped));
    line_u(o, "unwind_fallbacks", atomic_load(&ml_cfg.unwind_fallbacks));
    line_u(o, "max_depth", (uint64_t)ml_cfg.max_depth);
    ml_modules_write(o);
    write_maps(o);
    dump_samples = 0;
    ml_stacks_each(write_stack, o);
    ml_out_flush(o); /* patch before `end`: a file with `end` is complete */
    char digits[20];
    uint64_t v = dump_samples;
    for (int i = 19; i >= 0; i--, v /= 10)
        digits[i] = (char)('0' + v % 10);
    if (samples_at >= 0 && pwrite(o->fd, digits, sizeof digits, samples_at) != (ssize_t)sizeof digits)
        o->err = errno;
    ml_views_write(o);
    ml_out_str(o, "end\n");
}

int ml_dump(const char *path, const char *reason)
{
    struct ml_out o;
    ml_tls.busy++;
    ml_dump_lock();
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0) {
        o.fd = fd;
        o.err = 0;
        o.n = 0;
        write_dump(&o, reason);
        ml_out_flush(&o);
        err = o.err;
        if (close(fd) != 0 && !err)
            err = errno;
    }
    ml_dump_unlock();
    ml_tls.busy--;
    return -err;
}

/* `<prefix>.<pid>.<seq>.raw` into buf; the sequence keeps dumps of one pid apart (exec keeps the pid). */
static void auto_name(char *buf, size_t cap, uint64_t s)
{
    struct ml_out o = {.fd = -1};
    ml_out_str(&o, ml_cfg.out);
    ml_out_str(&o, ".");
    ml_out_u64(&o, (uint64_t)getpid());
    ml_out_str(&o, ".");
    ml_out_u64(&o, s);
    ml_out_str(&o, ".raw");
    size_t n = o.n < cap - 1 ? o.n : cap - 1;
    memcpy(buf, o.buf, n);
    buf[n] = 0;
}

int ml_dump_auto_path(const char *reason, char *path, size_t cap)
{
    if (!ml_cfg.out)
        return -EINVAL;
    if (strlen(ml_cfg.out) > cap - 64)
        return -ENAMETOOLONG;
    for (int tries = 0; tries < 10000; tries++) {
        auto_name(path, cap, atomic_fetch_add(&seq, 1));
        int r = ml_dump(path, reason);
        if (r != -EEXIST)
            return r;
    }
    return -EEXIST;
}

int ml_dump_auto(const char *reason)
{
    char path[4096];
    return ml_dump_auto_path(reason, path, sizeof path);
}
