/* The control socket's protocol: each connection carries one request line (at most
 * ML_CTL_LINE_MAX bytes, within 2 s: the thread, ctl.c, reads it) and gets one reply line:
 *
 *     start [INTERVAL]   -> ok active=1 interval=N was=0|1
 *     stop               -> ok active=0 was=0|1
 *     dump NAME          -> ok dumped NAME            (a raw dump this process writes into the
 *                                                      socket directory; the CLI moves it out)
 *     reset              -> ok reset
 *     status             -> ok pid=N active=0|1 interval=N samples=N alloc_bytes=N stacks=N truncated=N dropped=N
 *                           inuse_bytes=N mmap_inuse_bytes=N dropped_bytes=N max_stacks=N table_full=N
 *                           cost_ns=N cost_calls=N cpu_ns=N
 *     jemalloc status|start LG|stop  -> jemalloc's own profiler (jeprof.c)
 *     attach [interval=N] [active=0|1] [unwinder=NAME], detach  -> a runtime loaded by `memlens
 *                           attach` (attach.c; any other runtime answers "error …")
 *     anything else      -> error …
 *
 * The reply is built in the thread's fixed buffer: no malloc (strerrordesc_np does not allocate). */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "../sample/cost.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "attach.h"
#include "control.h"
#include "ctl_dir.h"
#include "ctl_proto.h"
#include "dump.h"
#include "jeprof.h"

/* The largest interval (the CLI's limit, memlens_target::MAX_INTERVAL): each countdown is drawn from
 * Exp(R) into a signed 64-bit counter. */
#define CTL_MAX_INTERVAL (1ull << 40)

static const char *err_text(int e)
{
    const char *d = strerrordesc_np(e);
    return d ? d : "unknown error";
}

/* Parse a decimal byte count; -1 if `s` is not one. */
static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == 0)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

static void do_status(struct ml_buf *r)
{
    struct ml_status s;
    ml_get_status(&s);
    ml_buf_str(r, "ok");
    ml_buf_kv(r, "pid", (uint64_t)getpid());
    ml_buf_kv(r, "active", (uint64_t)(s.active != 0));
    ml_buf_kv(r, "interval", s.interval);
    ml_buf_kv(r, "samples", s.samples);
    ml_buf_kv(r, "alloc_bytes", s.alloc_bytes);
    ml_buf_kv(r, "stacks", s.stacks);
    ml_buf_kv(r, "truncated", s.truncated);
    ml_buf_kv(r, "dropped", s.dropped);
    ml_buf_kv(r, "inuse_bytes", s.inuse_bytes);
    ml_buf_kv(r, "mmap_inuse_bytes", s.mmap_inuse_bytes);
    ml_buf_kv(r, "dropped_bytes", atomic_load(&ml_st->dropped_bytes));
    ml_buf_kv(r, "max_stacks", ml_stacks_max());
    ml_buf_kv(r, "table_full", ml_stacks_full_drops());
    uint64_t cost_ns, calls, cpu_ns; /* cost.c: what profiling has cost this process so far */
    if (ml_cost_get(&cost_ns, &calls, &cpu_ns) == 0) {
        ml_buf_kv(r, "cost_ns", cost_ns);
        ml_buf_kv(r, "cost_calls", calls);
        ml_buf_kv(r, "cpu_ns", cpu_ns);
    }
}

static void do_start(const char *arg, struct ml_buf *r)
{
    uint64_t interval = 0;
    if (*arg && parse_u64(arg, &interval) != 0) {
        ml_buf_str(r, "error start: interval must be a number of bytes, got '");
        ml_buf_str(r, arg);
        ml_buf_str(r, "'");
        return;
    }
    if (interval > CTL_MAX_INTERVAL) {
        ml_buf_str(r, "error start: interval too large (at most 1099511627776 bytes, 1 TiB)");
        return;
    }
    if (*arg)
        ml_set_interval(interval);
    int was = ml_set_active(1);
    struct ml_status s;
    ml_get_status(&s);
    ml_buf_str(r, "ok");
    ml_buf_kv(r, "active", 1);
    ml_buf_kv(r, "interval", s.interval);
    ml_buf_kv(r, "was", (uint64_t)(was != 0));
}

/* A dump file name: letters, digits, '.', '_', '-', not starting with '.', so that the dump stays
 * in the socket directory (no '/', no "..") and is never one of our sockets. */
static int dump_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 128 || name[0] == '.' || (n >= 5 && !strcmp(name + n - 5, ".sock")))
        return 0;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            return 0;
    return 1;
}

/* The dump is written into the socket directory only: a peer with our uid must not be able to make
 * this process write files elsewhere with its rights. The CLI copies it out. */
static void do_dump(const char *name, struct ml_buf *r)
{
    if (*name == 0) {
        ml_buf_str(r, "error dump: missing NAME");
        return;
    }
    if (!dump_name_ok(name)) {
        ml_buf_str(r, "error dump: NAME must be a plain file name (letters, digits, '.', '_', '-'); "
                   "the dump is written into the control directory");
        return;
    }
    char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 160];
    struct ml_buf pb = {path, 0, sizeof path};
    ml_buf_str(&pb, ml_ctl_dirpath());
    ml_buf_str(&pb, "/");
    ml_buf_str(&pb, name);
    const char *path_ = path;
    int e = ml_dump(path_, "ctl");
    if (e != 0) {
        ml_buf_str(r, "error cannot write dump ");
        ml_buf_str(r, path_);
        ml_buf_str(r, ": ");
        ml_buf_str(r, err_text(-e));
        return;
    }
    ml_buf_str(r, "ok dumped ");
    ml_buf_str(r, name);
}

/* Execute request `line` (NUL-terminated, no newline) and write the reply into r. */
static void handle(char *line, struct ml_buf *r)
{
    char *arg = line;
    while (*arg && *arg != ' ')
        arg++;
    if (*arg)
        *arg++ = 0;
    if (strcmp(line, "status") == 0) {
        do_status(r);
    } else if (strcmp(line, "start") == 0) {
        do_start(arg, r);
    } else if (strcmp(line, "stop") == 0) {
        ml_buf_str(r, "ok active=0 was=");
        ml_buf_u64(r, (uint64_t)(ml_set_active(0) != 0));
    } else if (strcmp(line, "dump") == 0) {
        do_dump(arg, r);
    } else if (strcmp(line, "reset") == 0) {
        ml_reset();
        ml_buf_str(r, "ok reset");
    } else if (strcmp(line, "jemalloc") == 0) {
        ml_jemalloc_ctl(arg, r->p + r->len, r->cap - r->len);
        r->len += strlen(r->p + r->len);
    } else if (ml_attach_ctl(line, arg, r->p + r->len, r->cap - r->len)) {
        r->len += strlen(r->p + r->len);
    } else {
        ml_buf_str(r, "error unknown command '");
        ml_buf_str(r, line);
        ml_buf_str(r, "' (expected start, stop, dump, reset, status or jemalloc)");
    }
}

/* Even a refused peer's request was read first (ctl.c): closing with unread data would reset the
 * connection and lose the reply that tells them why. */
void ml_ctl_reply(char *line, size_t len, int complete, int too_long, int allowed, struct ml_buf *r)
{
    if (len && line[len - 1] == '\r')
        len--;
    line[len] = 0;
    if (!allowed)
        ml_buf_str(r, "error permission denied: only the owner of this process (or root) may control it");
    else if (too_long)
        ml_buf_str(r, "error request too long (one line of at most 511 bytes)");
    else if (!complete || len == 0)
        ml_buf_str(r, "error empty request (or not sent within 2 s)");
    else
        handle(line, r);
}
