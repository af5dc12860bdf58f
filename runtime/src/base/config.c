/* The configuration: MEMLENS_* read from the environment into ml_cfg (rt.c), once, from ml_init
 * (before main, or at the first malloc if that comes first). The bottom floor: it calls nothing of
 * the runtime but the log, so every file may read what it sets. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "proc.h"

const char *ml_unwinder_name(int u)
{
    return u == ML_UNW_FP ? "fp" : u == ML_UNW_LIBGCC ? "libgcc" : u == ML_UNW_DWARF ? "dwarf" : "libunwind";
}

/* Sizes like 524288, 512K, 512KiB, 2M, at most 2^40 (an interval the Exp(R) countdown, a signed
 * 64-bit counter, has room for; the CLI's limit too). Returns -1 on garbage or a size too large. */
static int64_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || v > (1ull << 40))
        return -1;
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    return *end || (v << shift) > (1ull << 40) ? -1 : (int64_t)(v << shift);
}

static char out_buf[4000];
char ml_ctl_dir_env[4000];
char ml_run_dir_env[4000];

/* Copy environment variable `name` into buf; returns buf, or NULL when it is unset, empty or does
 * not fit (a truncated path would be another path). */
static const char *ml_env_copy(const char *name, char *buf, size_t cap)
{
    const char *s = getenv(name);
    size_t n = s ? strlen(s) : 0;
    buf[0] = 0;
    if (!n)
        return NULL;
    if (n >= cap) {
        ml_log("%s is too long (%zu bytes, at most %zu); ignored", name, n, cap - 1);
        return NULL;
    }
    memcpy(buf, s, n + 1);
    return buf;
}

void ml_config_read(void)
{
    ml_log_init();
    ml_seccomp_refresh(); /* a seccomp filter from the start (systemd's SystemCallFilter=) */
    const char *s = getenv("MEMLENS_INTERVAL");
    if (s && *s) {
        int64_t v = parse_size(s);
        if (v < 0)
            ml_log("MEMLENS_INTERVAL=%s is not a size of at most 1 TiB; using 524288", s);
        else
            ml_cfg.interval = (uint64_t)v;
    }
    /* Anonymous mmap is sampled unless MEMLENS_MMAP=0 (an allocator's own arenas are told apart
     * by their stacks and left out: intercept/mmapwho.c). */
    s = getenv("MEMLENS_MMAP");
    ml_cfg.mmap = !(s && s[0] == '0');
    s = getenv("MEMLENS_ACTIVE");
    if (s && *s)
        ml_cfg.active = *s != '0';
    s = getenv("MEMLENS_MAX_DEPTH");
    if (s && *s) {
        int64_t v = parse_size(s);
        ml_cfg.max_depth = v < 1 ? 64 : v > ML_MAX_DEPTH ? ML_MAX_DEPTH : (int)v;
    }
    s = getenv("MEMLENS_UNWINDER");
    if (s && *s) {
        if (s[0] == 'f' && s[1] == 'p' && !s[2])
            ml_cfg.unwinder = ML_UNW_FP;
        else if (!__builtin_strcmp(s, "libgcc"))
            ml_cfg.unwinder = ML_UNW_LIBGCC;
        else if (!__builtin_strcmp(s, "libunwind"))
            ml_cfg.unwinder = ML_UNW_LIBUNWIND;
        else if (!__builtin_strcmp(s, "dwarf"))
            ml_cfg.unwinder = ML_UNW_DWARF;
        else
            ml_log("MEMLENS_UNWINDER=%s: must be dwarf, fp, libgcc or libunwind; using the default", s);
    }
    /* Copied, not pointed at: programs that set their process title (redis, nginx, PostgreSQL)
     * overwrite the environment strings in place. */
    ml_cfg.out = ml_env_copy("MEMLENS_OUT", out_buf, sizeof out_buf);
    ml_env_copy("MEMLENS_CTL_DIR", ml_ctl_dir_env, sizeof ml_ctl_dir_env);
    /* where the state file goes (state.c); `memlens run` makes it */
    ml_env_copy("MEMLENS_RUN_DIR", ml_run_dir_env, sizeof ml_run_dir_env);
}
