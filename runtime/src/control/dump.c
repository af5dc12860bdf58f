/* The raw dump (format: runtime/README.md). Written with write(2) from a stack buffer; never allocates
 * through malloc, so it is safe at exit, in a fork child and right before exec. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/fmt.h"
#include "../base/notes.h"
#include "../base/out.h"
#include "../base/proc.h"
#include "../record/block.h"
#include "../record/lifetime.h"
#include "../sample/cost.h"
#include "../store/modules.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "dump.h"

static _Atomic int dump_lock;
static _Atomic int dump_owner; /* tid holding dump_lock, 0 if none */
static _Atomic uint64_t seq;
/* Only with the dump lock held: the output buffer and scratch space live here rather than on the
 * stack, so a dump from _exit in a signal handler fits on a small sigaltstack. */
static struct ml_out out;
static char scratch[4096];

#define LOCK_WAIT_US 100
#define LOCK_TRIES 50000 /* 5 s: a dump of another thread is long finished by then */

void ml_dump_lock(void)
{
    while (atomic_exchange_explicit(&dump_lock, 1, memory_order_acquire))
        usleep(LOCK_WAIT_US);
    atomic_store(&dump_owner, (int)gettid());
}
void ml_dump_unlock(void)
{
    atomic_store(&dump_owner, 0);
    ml_spin_unlock(&dump_lock);
}
void ml_dump_lock_reset(void)
{
    atomic_store(&dump_owner, 0);
    atomic_store(&dump_lock, 0);
    atomic_store(&seq, 0);
}

/* The lock for one dump, never waiting for ourselves (a signal handler that dumps, or calls _exit,
 * while its thread was dumping) nor forever. 0 or -errno. */
static int dump_trylock(void)
{
    int me = (int)gettid();
    if (atomic_load(&dump_owner) == me)
        return -EDEADLK;
    for (int i = 0; atomic_exchange_explicit(&dump_lock, 1, memory_order_acquire); i++) {
        if (i == LOCK_TRIES)
            return -EBUSY;
        usleep(LOCK_WAIT_US);
    }
    atomic_store(&dump_owner, me);
    return 0;
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
        char *buf = scratch; /* the exe path in it is written by now */
        int last_nl = 1;
        for (;;) {
            ssize_t r = read(fd, buf, sizeof scratch - 1);
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
    int stale = ml_stack_stale(r); /* fork child: the parent's cumulative counts */
    uint64_t samples = stale ? 0 : atomic_load_explicit(&r->samples, memory_order_relaxed);
    int64_t d[4]; /* with what live blocks had not flushed yet (block.c, ml_blocks_dump_begin) */
    ml_blocks_unflushed(r, d);
    uint64_t alloc_fx = (stale ? 0 : atomic_load_explicit(&r->alloc_fx, memory_order_relaxed)) + (uint64_t)d[0];
    uint64_t alloc_b = (stale ? 0 : atomic_load_explicit(&r->alloc_bytes, memory_order_relaxed)) + (uint64_t)d[1];
    int64_t inuse_fx = atomic_load_explicit(&r->inuse_fx, memory_order_relaxed) + d[2];
    int64_t inuse_b = atomic_load_explicit(&r->inuse_bytes, memory_order_relaxed) + d[3];
    if (!samples && !alloc_fx && !inuse_fx && !inuse_b)
        return; /* nothing since the last reset */
    dump_samples += samples;
    ml_out_str(o, "stack ");
    ml_out_u64(o, samples);
    ml_out_str(o, " ");
    ml_out_u64(o, alloc_fx);
    ml_out_str(o, " ");
    ml_out_u64(o, alloc_b);
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

/* The name the program was started as, argv[0] (`redis-server`, where /proc/self/exe reads the file
 * its symlink points to, `redis-check-rdb`). A program that rewrote its title in place
 * (`redis-server *:6379`, `nginx: master process …`) keeps its name before the first space. */
static void write_cmd(struct ml_out *o)
{
    char *s = scratch;
    if (ml_proc_read("/proc/self/cmdline", s, sizeof scratch) <= 0)
        return;
    size_t n = 0;
    while (s[n] && s[n] != ' ')
        n++;
    if (n > 0 && s[n - 1] == ':')
        n--;
    s[n] = 0;
    if (n == 0)
        return;
    ml_out_str(o, "cmd ");
    ml_out_path(o, s);
    ml_out_str(o, "\n");
}

static void write_dump(struct ml_out *o, const char *reason)
{
    char *exe = scratch;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof scratch - 1);
    exe[n > 0 ? n : 0] = 0;
    ml_out_str(o, "memlens-raw 1\n");
    line_u(o, "pid", (uint64_t)getpid());
    line_u(o, "ppid", (uint64_t)getppid());
    ml_out_str(o, "exe ");
    ml_out_path(o, exe);
    ml_out_str(o, "\n");
    write_cmd(o); /* scratch is free again: the exe path is in the output */
    line_u(o, "interval", atomic_load(&ml_cfg.interval));
    line_s(o, "unwinder", ml_unwinder_name(ml_cfg.unwinder));
    line_u(o, "active", (uint64_t)atomic_load(&ml_cfg.active));
    line_s(o, "reason", reason);
    line_u(o, "start_ns", atomic_load(&ml_cfg.start_ns));
    line_u(o, "time_ns", ml_now_ns());
    ml_out_str(o, "samples ");
    off_t samples_at = lseek(o->fd, 0, SEEK_CUR) + (off_t)o->n;
    ml_out_str(o, "00000000000000000000\n");
    line_u(o, "truncated", atomic_load(&ml_st->truncated));
    line_u(o, "dropped", atomic_load(&ml_st->dropped));
    line_u(o, "unwind_fallbacks", atomic_load(&ml_st->unwind_fallbacks));
    line_u(o, "max_depth", (uint64_t)ml_cfg.max_depth);
    line_u(o, "dropped_bytes", atomic_load(&ml_st->dropped_bytes));
    line_u(o, "max_stacks", ml_stacks_max());
    line_u(o, "table_full", ml_stacks_full_drops());
    line_u(o, "untracked", atomic_load(&ml_st->untracked));
    ml_cost_write(o); /* cost_ns, cost_calls, cpu_ns: what profiling has cost so far (cost.c) */
    ml_notes_write(o); /* `note` lines: allocators hooked, and what memlens cannot see */
    ml_modules_write(o);
    write_maps(o);
    dump_samples = 0;
    ml_blocks_dump_begin();
    ml_stacks_each(write_stack, o);
    ml_out_flush(o); /* patch before `end`: a file with `end` is complete */
    char digits[ML_FMT_MAX];
    ml_fmt_u64(digits, dump_samples, 20);
    if (samples_at >= 0 && pwrite(o->fd, digits, 20, samples_at) != 20)
        o->err = errno;
    ml_views_write(o);
    ml_out_str(o, "end\n");
}

/* Write one dump to `path`; the dump lock is held. */
static int dump_to(const char *path, const char *reason)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    out.fd = fd;
    out.err = 0;
    out.n = 0;
    write_dump(&out, reason);
    ml_out_flush(&out);
    int err = out.err;
    if (close(fd) != 0 && !err)
        err = errno;
    return -err;
}

int ml_dump(const char *path, const char *reason)
{
    ml_state_own(); /* a dump writes into the records (dump.c, block.c): a fork child's own */
    ml_tls.busy++;
    int r = dump_trylock();
    if (r == 0) {
        r = dump_to(path, reason);
        ml_dump_unlock();
    }
    ml_tls.busy--;
    return r;
}

static size_t put(char *buf, size_t at, size_t cap, const char *s)
{
    while (*s && at + 1 < cap)
        buf[at++] = *s++;
    buf[at] = 0;
    return at;
}

static size_t put_u(char *buf, size_t at, size_t cap, uint64_t v)
{
    char tmp[ML_FMT_MAX];
    ml_fmt_u64(tmp, v, 0);
    return put(buf, at, cap, tmp);
}

/* `<prefix>.<pid>.<seq>.raw` into buf; the sequence keeps dumps of one pid apart (exec keeps the pid). */
static void auto_name(char *buf, size_t cap, uint64_t s)
{
    size_t at = put(buf, 0, cap, ml_cfg.out);
    at = put(buf, at, cap, ".");
    at = put_u(buf, at, cap, (uint64_t)getpid());
    at = put(buf, at, cap, ".");
    at = put_u(buf, at, cap, s);
    put(buf, at, cap, ".raw");
}

int ml_dump_auto_seq(const char *reason, uint64_t *which)
{
    if (!ml_cfg.out)
        return -EINVAL;
    if (strlen(ml_cfg.out) > sizeof out.buf - 64)
        return -ENAMETOOLONG;
    ml_state_own();
    ml_tls.busy++;
    int r = dump_trylock();
    if (r == 0) {
        /* The name is built in the output buffer's own space: nothing path-sized on the stack. */
        static char path[sizeof out.buf];
        for (int tries = 0; tries < 10000; tries++) {
            uint64_t s = atomic_fetch_add(&seq, 1);
            auto_name(path, sizeof path, s);
            r = dump_to(path, reason);
            if (which)
                *which = s;
            if (r != -EEXIST)
                break;
        }
        ml_dump_unlock();
    }
    ml_tls.busy--;
    return r;
}

void ml_dump_auto_remove(uint64_t which)
{
    char path[4096 + 64]; /* after a failed exec: the dump is over, its stack is free again */
    auto_name(path, sizeof path, which);
    unlink(path);
}

int ml_dump_auto(const char *reason) { return ml_dump_auto_seq(reason, NULL); }
