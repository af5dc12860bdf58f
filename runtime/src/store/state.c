/* The runtime's state in a file that outlives the process.
 *
 * Whatever ends a process — exit_group without exit handlers (Go, cgo), SIGKILL, the OOM killer, a
 * signal without a handler, a privilege drop that forbids the dump at exit — what it sampled must
 * reach the user. So the state a dump is made of lives in a MAP_SHARED mapping of a file in the run
 * directory `memlens run` made (MEMLENS_RUN_DIR, on tmpfs): the stack records and their counters,
 * the list of records, the modules the frames lie in, the timeline, the counters and the views'
 * scalars. The runtime writes them there as it always did (the mapping is its memory); when the
 * process is gone, however it went, the page cache still holds every write, and `memlens run` (or
 * `memlens report RUNDIR` later) renders the dump from the file. docs/survival.md has the design.
 *
 * File: `<run dir>/<pid>.<n>.state` (n: the image, counted with O_EXCL: exec keeps the pid), 0600,
 * sized once (ftruncate, sparse) to [header page | modules | timeline | list of records | arena].
 * Pages are reserved (fallocate) before they are first written, a chunk at a time: a full tmpfs
 * then drops samples (counted) instead of killing the program with SIGBUS.
 * Without a run directory (a plain LD_PRELOAD, `memlens attach`), or when the file cannot be made,
 * the same layout lives in private memory: one code path, nothing survives.
 *
 * fork: the child must not write into its parent's file. Its atfork handler (before the child can
 * sample, drop privileges or chroot) makes its own file, copies the used part of the tables into it
 * with the cumulative counts zeroed (they are the parent's), and mremaps it over the parent's
 * mapping, at the same address: record ids and pointers stay valid. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/fd.h"
#include "../base/fmt.h"
#include "../base/log.h"
#include "../base/proc.h"
#include "../base/views.h"
#include "../record/block.h"
#include "stacks.h"
#include "state.h"

#define PAGE 4096u
#define CHUNK (64u << 10) /* bytes reserved at a time, at most */

static struct ml_state fallback_header; /* until the state is mapped (and if it never is) */
struct ml_state *ml_st = &fallback_header;
struct ml_state_module *ml_st_modules;
struct ml_state_point *ml_st_points;

static char *base;          /* the mapping */
static uint64_t total;      /* its size (the file's) */
static int in_file;         /* MAP_SHARED of the state file (else private memory) */
/* Our descriptors of the state file and the run directory, high and checked before use (base/fd.c),
 * and the run directory's identity, to open it again by its path only if it is still the same. */
static struct ml_fd state_f = ML_FD_NONE, dir_f = ML_FD_NONE;
static dev_t dir_dev;
static ino_t dir_ino;
static char file_name[64];
static uint64_t room_arena, room_listed, room_modules, room_points; /* reserved so far (bytes) */
static _Atomic int room_lock;

static uint64_t round_page(uint64_t v) { return (v + PAGE - 1) & ~(uint64_t)(PAGE - 1); }

static int dir_ok(void);

/* The state file's descriptor, or -1. The program may have closed ours (daemons close every
 * descriptor they did not open) and the number may be someone else's now: the file is opened again
 * by its name in the run directory, if that name still holds the very same file. Pages already
 * reserved stay usable meanwhile (the mapping does not need the descriptor); new ones that cannot
 * be reserved drop their samples (counted). */
static int file_ok(void)
{
    int fd = ml_fd_get(&state_f);
    if (fd >= 0 || !in_file || !state_f.ino)
        return fd;
    int d = dir_ok();
    fd = d < 0 ? -1 : ml_fd_high(openat(d, file_name, O_RDWR | O_CLOEXEC | O_NOFOLLOW));
    if (fd >= 0 && ml_fd_is(fd, state_f.dev, state_f.ino))
        return state_f.fd = fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* The run directory's descriptor, opened again by its path if the program closed ours (and only if
 * the path still names the same directory). */
static int dir_ok(void)
{
    int fd = ml_fd_get(&dir_f);
    if (fd >= 0)
        return fd;
    fd = ml_fd_adopt(&dir_f, open(ml_run_dir_env, O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (fd < 0)
        return -1;
    if (dir_dev && (dir_f.dev != dir_dev || dir_f.ino != dir_ino)) {
        ml_fd_close(&dir_f);
        return -1;
    }
    dir_dev = dir_f.dev;
    dir_ino = dir_f.ino;
    return fd;
}

/* Remove the state file we could not use. */
static void drop_file(struct ml_fd *f)
{
    int d = ml_fd_get(&dir_f);
    if (d >= 0)
        unlinkat(d, file_name, 0);
    ml_fd_close(f);
}

/* `<pid>.<n>.state`, created with O_EXCL in the run directory; the descriptor or -1. */
static int create_file(void)
{
    int dfd = dir_ok();
    if (dfd < 0)
        return -1;
    char pid[ML_FMT_MAX], n[ML_FMT_MAX];
    ml_fmt_u64(pid, (uint64_t)getpid(), 0);
    for (uint64_t i = 0; i < 1000; i++) {
        ml_fmt_u64(n, i, 0);
        size_t at = 0;
        for (const char *s = pid; *s; s++)
            file_name[at++] = *s;
        file_name[at++] = '.';
        for (const char *s = n; *s; s++)
            file_name[at++] = *s;
        memcpy(file_name + at, ".state", 7);
        int fd = openat(dfd, file_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0)
            return ml_fd_high(fd);
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

/* Reserve the file's bytes [off, off + len). */
static int reserve(int fd, uint64_t off, uint64_t len)
{
    if (!len)
        return 0;
    int r;
    do
        r = fallocate(fd, 0, (off_t)off, (off_t)len);
    while (r != 0 && errno == EINTR);
    return r;
}

/* The region at `at` of `cap` bytes can be written up to `end`: reserve chunk by chunk. */
static int room(uint64_t at, uint64_t cap, uint64_t *reserved, uint64_t end)
{
    if (likely(end <= __atomic_load_n(reserved, __ATOMIC_ACQUIRE)))
        return 0;
    if (end > cap)
        return -1;
    if (!in_file) {
        __atomic_store_n(reserved, cap, __ATOMIC_RELEASE);
        return 0;
    }
    ml_spin_lock(&room_lock);
    int r = 0;
    uint64_t have = *reserved;
    if (end > have) {
        /* A region grows by what it has (at least a page, at most CHUNK): a process that writes
         * little (most fork children) reserves pages, not 64 KiB per region. */
        uint64_t step = have < PAGE ? PAGE : have > CHUNK ? CHUNK : have;
        uint64_t want = (end + step - 1) / step * step;
        if (want > cap)
            want = cap;
        int fd = file_ok();
        r = fd < 0 ? -1 : reserve(fd, at + have, want - have);
        if (r == 0)
            __atomic_store_n(reserved, want, __ATOMIC_RELEASE);
    }
    ml_spin_unlock(&room_lock);
    return r;
}

int ml_state_arena_room(uint64_t end)
{
    return room(ml_st->arena_at, ml_st->arena_cap, &room_arena, end);
}

int ml_state_listed_room(uint64_t entries)
{
    return room(ml_st->listed_at, ml_st->listed_cap * 4, &room_listed, entries * 4);
}

int ml_state_modules_room(uint64_t entries)
{
    return room(ml_st->modules_at, ml_st->modules_cap * sizeof(struct ml_state_module),
                &room_modules, entries * sizeof(struct ml_state_module));
}

int ml_state_points_room(uint64_t entries)
{
    return room(ml_st->points_at, ml_st->points_cap * sizeof(struct ml_state_point), &room_points,
                entries * sizeof(struct ml_state_point));
}

int ml_state_in_file(void) { return in_file; }

/* /proc/self/stat's starttime (field 22): with the pid, it names this process among all that will
 * ever have that pid. */
static uint64_t start_ticks(void)
{
    char b[1024];
    const char *p = ml_proc_read("/proc/self/stat", b, sizeof b) > 0 ? ml_proc_after_comm(b) : NULL;
    if (!p)
        return 0;
    int field = 2; /* the comm was field 2 */
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p == ' ') {
            if (field == 22)
                break;
            field++;
            v = 0;
            continue;
        }
        if (field == 22 && *p >= '0' && *p <= '9')
            v = v * 10 + (uint64_t)(*p - '0');
    }
    return field == 22 ? v : 0;
}

/* Who this process is, in the header. */
static void describe(struct ml_state *h)
{
    h->pid = getpid();
    h->ppid = getppid();
    h->uid = (uint32_t)geteuid();
    h->start_ns = ml_now_ns();
    h->start_ticks = start_ticks();
    ssize_t n = readlink("/proc/self/exe", h->exe, sizeof h->exe - 1);
    h->exe[n > 0 ? n : 0] = 0;
    atomic_store(&h->status, ML_ST_RUNNING);
    atomic_store(&h->final_seq, ~0ull);
    atomic_store(&h->snapped, 1);
    h->table_own = 1;
    atomic_store(&h->views_on, atomic_load(&ml_views_on));
    atomic_store(&h->interval, atomic_load(&ml_cfg.interval));
    atomic_store(&h->active, (uint32_t)atomic_load(&ml_cfg.active));
    atomic_store(&h->unwinder, (uint32_t)ml_cfg.unwinder);
    atomic_store(&h->max_depth, (uint32_t)ml_cfg.max_depth);
}

/* The field directory: text at byte ML_STATE_DIR of the header page, `name@offset:size` separated
 * by spaces, for the header (h.), a module (m.), a timeline point (p.) and a stack record (s.). A
 * reader finds every field there: the structs may change without a change of the reader. */
struct dir {
    char *p;
    size_t len, cap;
};

static void dir_put(struct dir *d, const char *name, size_t off, size_t size)
{
    char num[ML_FMT_MAX];
    for (const char *s = name; *s && d->len + 1 < d->cap; s++)
        d->p[d->len++] = *s;
    const char *parts[2] = {"@", ":"};
    size_t vals[2] = {off, size};
    for (int k = 0; k < 2; k++) {
        ml_fmt_u64(num, vals[k], 0);
        for (const char *s = parts[k]; *s && d->len + 1 < d->cap; s++)
            d->p[d->len++] = *s;
        for (const char *s = num; *s && d->len + 1 < d->cap; s++)
            d->p[d->len++] = *s;
    }
    if (d->len + 1 < d->cap)
        d->p[d->len++] = ' ';
    d->p[d->len] = 0;
}

#define H(f) dir_put(&d, "h." #f, offsetof(struct ml_state, f), sizeof(((struct ml_state *)0)->f))
#define M(f) dir_put(&d, "m." #f, offsetof(struct ml_state_module, f), sizeof(((struct ml_state_module *)0)->f))
#define P(f) dir_put(&d, "p." #f, offsetof(struct ml_state_point, f), sizeof(((struct ml_state_point *)0)->f))
#define S(f) dir_put(&d, "s." #f, offsetof(struct ml_stack, f), sizeof(((struct ml_stack *)0)->f))

static void directory(char *page)
{
    struct dir d = {page + ML_STATE_DIR, 0, PAGE - ML_STATE_DIR};
    H(version), H(stack_bytes), H(life_n), H(module_bytes), H(point_bytes), H(modules_at), H(points_at);
    H(listed_at), H(arena_at), H(modules_cap), H(points_cap), H(listed_cap), H(arena_cap), H(pid), H(ppid);
    H(uid), H(fork_child), H(start_ns), H(start_ticks), H(exe), H(status), H(final_seq), H(interval);
    H(active), H(unwinder), H(max_depth), H(max_stacks), H(truncated), H(dropped), H(unwind_fallbacks);
    H(dropped_bytes), H(table_full), H(untracked), H(arena_used), H(nstacks), H(nmodules), H(heap);
    H(heap_max), H(heap_max_tick), H(snap_heap), H(snap_ns), H(snapped), H(views_on), H(anchor_tsc);
    H(clock_tsc), H(clock_ns), H(clock_hz), H(npoints), H(stats_kind), H(dumped), H(table_own);
    H(dump_errno);
    for (int h = 0; h < 2; h++) { /* peak.c's split: h.split_a, h.split_a_tick, h.split_b, ... */
        char name[] = "h.split_a", tick[] = "h.split_a_tick";
        name[8] = tick[8] = (char)('a' + h);
        dir_put(&d, name, offsetof(struct ml_state, half_other[h]), 8);
        dir_put(&d, tick, offsetof(struct ml_state, half_tick[h]), 8);
    }
    M(base), M(state), M(nseg), M(idlen), M(id), M(seg), M(path);
    dir_put(&d, "m.seg_bytes", 0, sizeof(((struct ml_state_module *)0)->seg[0]));
    size_t s0 = offsetof(struct ml_state_module, seg[0]);
    dir_put(&d, "ms.vaddr", offsetof(struct ml_state_module, seg[0].vaddr) - s0, 8);
    dir_put(&d, "ms.memsz", offsetof(struct ml_state_module, seg[0].memsz) - s0, 8);
    dir_put(&d, "ms.offset", offsetof(struct ml_state_module, seg[0].offset) - s0, 8);
    dir_put(&d, "ms.flags", offsetof(struct ml_state_module, seg[0].flags) - s0, 4);
    P(ns), P(heap), P(rss), P(in_use), P(footprint), P(mmap);
    S(depth), S(flags), S(samples), S(alloc_fx), S(alloc_bytes), S(inuse_fx), S(inuse_bytes), S(peak_fx);
    S(peak_bytes), S(age_sum), S(age_w), S(life);
    dir_put(&d, "s.pcs", offsetof(struct ml_stack, pcs), sizeof(uintptr_t));
}

static void layout(struct ml_state *h, uint64_t listed, uint64_t arena)
{
    memcpy(h->magic, "memlens-state\n", 15);
    h->version = ML_STATE_VERSION;
    h->header_bytes = sizeof(struct ml_state);
    h->stack_bytes = sizeof(struct ml_stack);
    h->life_n = ML_LIFE_BUCKETS;
    h->off[ML_OFF_SAMPLES] = offsetof(struct ml_stack, samples);
    h->off[ML_OFF_ALLOC_FX] = offsetof(struct ml_stack, alloc_fx);
    h->off[ML_OFF_ALLOC_BYTES] = offsetof(struct ml_stack, alloc_bytes);
    h->off[ML_OFF_INUSE_FX] = offsetof(struct ml_stack, inuse_fx);
    h->off[ML_OFF_INUSE_BYTES] = offsetof(struct ml_stack, inuse_bytes);
    h->off[ML_OFF_PEAK_FX] = offsetof(struct ml_stack, peak_fx);
    h->off[ML_OFF_PEAK_BYTES] = offsetof(struct ml_stack, peak_bytes);
    h->off[ML_OFF_AGE_SUM] = offsetof(struct ml_stack, age_sum);
    h->off[ML_OFF_AGE_W] = offsetof(struct ml_stack, age_w);
    h->off[ML_OFF_LIFE] = offsetof(struct ml_stack, life);
    h->off[ML_OFF_DEPTH] = offsetof(struct ml_stack, depth);
    h->off[ML_OFF_FLAGS] = offsetof(struct ml_stack, flags);
    h->off[ML_OFF_PCS] = offsetof(struct ml_stack, pcs);
    h->module_bytes = sizeof(struct ml_state_module);
    h->point_bytes = sizeof(struct ml_state_point);
    h->modules_cap = ML_STATE_MODULES;
    h->points_cap = ML_STATE_POINTS;
    h->listed_cap = listed;
    h->arena_cap = arena;
    h->modules_at = PAGE;
    h->points_at = h->modules_at + round_page(ML_STATE_MODULES * sizeof(struct ml_state_module));
    h->listed_at = h->points_at + round_page(ML_STATE_POINTS * sizeof(struct ml_state_point));
    h->arena_at = h->listed_at + round_page(listed * 4);
}

_Static_assert(sizeof(struct ml_state) <= ML_STATE_DIR, "the header fits before its directory");

static void point_at(char *m)
{
    ml_st = (struct ml_state *)m;
    ml_st_modules = (struct ml_state_module *)(m + ml_st->modules_at);
    ml_st_points = (struct ml_state_point *)(m + ml_st->points_at);
}

int ml_state_init(uint64_t listed, uint64_t arena, _Atomic uint32_t **listed_p, char **arena_p)
{
    struct ml_state h;
    memset(&h, 0, sizeof h);
    layout(&h, listed, arena);
    total = h.arena_at + round_page(arena);
    char *m = MAP_FAILED;
    int fd = ml_run_dir_env[0] ? ml_fd_adopt(&state_f, create_file()) : -1;
    if (fd >= 0 && ftruncate(fd, (off_t)total) == 0 && reserve(fd, 0, PAGE) == 0)
        m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (m != MAP_FAILED) {
        in_file = 1;
    } else {
        if (fd >= 0)
            drop_file(&state_f);
        m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            ml_fail("cannot map the profiler's state (0x%llx bytes: %llu table slots, a 0x%llx-byte arena): %m",
                    (unsigned long long)total, (unsigned long long)listed, (unsigned long long)arena);
            return -1;
        }
    }
    base = m;
    /* what was counted before the mapping (nothing but the configuration) comes along */
    memcpy(m, &fallback_header, sizeof fallback_header);
    memcpy(m, &h, offsetof(struct ml_state, pid));
    directory(m);
    point_at(m);
    describe(ml_st);
    *listed_p = (_Atomic uint32_t *)(m + ml_st->listed_at);
    *arena_p = m + ml_st->arena_at;
    return 0;
}

/* Zero the counts of the records in a copy of the table part (`t`: the list at offset 0, the arena
 * at arena_at - listed_at): they are the parent's. The cumulative ones start over; the live ones are
 * counted again from the blocks the child inherited (block.c), because the copy is taken at the
 * child's first write, and the parent has been changing them in the shared file since the fork;
 * the peak columns wait for the child's own first snapshot. */
static void zero_counts(char *t, const struct ml_state *h)
{
    const _Atomic uint32_t *listed = (const _Atomic uint32_t *)t;
    char *arena = t + (h->arena_at - h->listed_at);
    for (uint32_t i = 0; i < h->nstacks && i < h->listed_cap; i++) {
        uint32_t id = listed[i];
        if (!id || (uint64_t)(id - 1) * 8 + sizeof(struct ml_stack) > h->arena_used)
            continue;
        struct ml_stack *r = (struct ml_stack *)(arena + (uint64_t)(id - 1) * 8);
        r->samples = r->alloc_fx = r->alloc_bytes = 0;
        for (int k = 0; k < ML_LIFE_BUCKETS; k++)
            r->life[k] = 0;
        r->peak_fx = r->peak_bytes = 0;
        r->inuse_fx = r->inuse_bytes = r->age_w = 0;
        r->age_sum = 0;
        r->dumped_inuse = 0;
    }
}

/* A fork child whose stack table is still its parent's (the table part of the mapping maps the
 * parent's file, which the child must never write): copied at its first write (ml_state_own). */
_Atomic int ml_st_table_pending;
static _Atomic int own_lock;

/* Put `m` (a mapping of `len` bytes) where [base + at, + len) is. */
static int replace(char *m, uint64_t at, uint64_t len)
{
    return mremap(m, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, base + at) == MAP_FAILED ? -1 : 0;
}

/* The table part (list of records and arena) becomes the child's own: a copy, in its file when it
 * has one, else in private memory, else (no memory) empty — never the parent's. */
static void own_table(void)
{
    const struct ml_state *h = ml_st;
    uint64_t at = h->listed_at, len = total - at;
    uint64_t used_listed = (uint64_t)h->nstacks * 4, used_arena = h->arena_used;
    char *m = MAP_FAILED;
    int fd = file_ok();
    if (fd >= 0 && reserve(fd, at, round_page(used_listed)) == 0 &&
        reserve(fd, h->arena_at, round_page(used_arena)) == 0)
        m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, (off_t)at);
    int file = m != MAP_FAILED;
    if (!file)
        m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    int err = errno; /* why the mmap failed, or (below) the mremap: the cleanup may change errno */
    if (m != MAP_FAILED) {
        memcpy(m, base + at, used_listed);
        memcpy(m + (h->arena_at - at), base + h->arena_at, used_arena);
        zero_counts(m, h);
        if (replace(m, at, len) == 0) {
            room_listed = file ? round_page(used_listed) : h->listed_cap * 4;
            room_arena = file ? round_page(used_arena) : h->arena_cap;
            ml_st->table_own = 1;
            return;
        }
        err = errno;
        munmap(m, len);
    }
    /* Nothing left but to stop: the table part is made empty private memory (the inherited records
     * read as zero), so that no write of ours can reach the parent's file. */
    mmap(base + at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    errno = err;
    ml_fail("fork child %d cannot copy the profiler's stack table (0x%llx bytes, %u stacks): %m",
            (int)getpid(), (unsigned long long)len, (unsigned)h->nstacks);
}

void ml_state_own_slow(void)
{
    ml_busy_enter(); /* a signal handler that samples meanwhile must not wait for this lock */
    ml_spin_lock(&own_lock);
    if (atomic_load_explicit(&ml_st_table_pending, memory_order_acquire)) {
        own_table();
        /* The live columns just copied are the parent's of now, not of the fork: it went on
         * allocating into the file since. Our blocks (private memory, as at the fork) say what is
         * ours. No one else writes a record meanwhile: every writer comes here first. */
        if (ml_st->table_own)
            ml_blocks_recount();
        atomic_store_explicit(&ml_st_table_pending, 0, memory_order_release);
    }
    ml_spin_unlock(&own_lock);
    ml_busy_leave();
}

/* The header as it was at the fork (fork.c's prepare handler, our locks held): the child's copy.
 * Read in the child from the parent's file instead, it would hold what the parent counted after
 * the fork (its heap, new stacks it listed), as far as the parent got before the child ran. */
static _Alignas(64) char fork_header[PAGE];

void ml_state_fork_prepare(void)
{
    if (base && in_file)
        memcpy(fork_header, base, PAGE);
}

void ml_state_fork_child(void)
{
    atomic_store(&room_lock, 0); /* a thread of the parent may have held it */
    atomic_store(&own_lock, 0);
    if (!base)
        return;
    if (!in_file) {
        /* private memory is the child's own copy already (copy-on-write); stacks.c reads the
         * parent's cumulative counts as zero */
        describe(ml_st);
        ml_st->fork_child = 1;
        return;
    }
    /* The small part (header, modules, timeline) is the child's at once: the atfork handlers write
     * the header. The table part (list and arena, the bulk) stays the parent's until the child
     * writes to it: a child that execs or exits without sampling copies nothing. */
    const struct ml_state *h = (const struct ml_state *)fork_header;
    uint64_t small = h->listed_at;
    uint64_t used_modules = h->nmodules * sizeof(struct ml_state_module);
    /* The parent's descriptor came along with fork: it is the parent's file, not ours (our copy of
     * it is closed, unless the program closed it already). */
    ml_fd_close(&state_f);
    char *m = MAP_FAILED;
    int fd = ml_fd_adopt(&state_f, create_file());
    if (fd >= 0 && ftruncate(fd, (off_t)total) == 0 && reserve(fd, 0, PAGE) == 0 &&
        reserve(fd, h->modules_at, round_page(used_modules)) == 0)
        m = mmap(NULL, small, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    int file = m != MAP_FAILED;
    if (!file) {
        if (fd >= 0)
            drop_file(&state_f);
        /* a private copy: the child is profiled, it only has no file to survive in */
        m = mmap(NULL, small, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    if (m == MAP_FAILED || (memcpy(m, fork_header, PAGE), memcpy(m + h->modules_at, base + h->modules_at, used_modules),
                            replace(m, 0, small)) != 0) {
        int err = errno; /* of the mmap or the mremap that failed */
        if (m != MAP_FAILED)
            munmap(m, small);
        if (file)
            drop_file(&state_f);
        /* The parent's file must not be written: private empty memory over all of it. */
        mmap(base, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        errno = err;
        ml_fail("fork child %d cannot map the profiler's state (0x%llx bytes%s): %m", (int)getpid(),
                (unsigned long long)small, file ? ", its own state file" : ", private memory");
        return;
    }
    room_modules = file ? round_page(used_modules) : h->modules_cap * sizeof(struct ml_state_module);
    room_points = file ? 0 : h->points_cap * sizeof(struct ml_state_point);
    room_listed = room_arena = 0;
    point_at(base);
    describe(ml_st);
    ml_st->fork_child = 1;
    ml_st->table_own = 0;
    atomic_store_explicit(&ml_st_table_pending, 1, memory_order_release);
}

void ml_state_final(uint64_t seq)
{
    atomic_store(&ml_st->final_seq, seq);
    atomic_store(&ml_st->status, seq == ~0ull             ? ML_ST_RUNNING
                                 : seq == ML_SEQ_NOTHING ? ML_ST_NOTHING
                                                         : ML_ST_DUMPED);
}
