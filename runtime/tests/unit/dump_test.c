/* control/dump.c, the raw dump writer, driven as the runtime drives it, for the Rust reader to read
 * back (crates/memlens-native/tests/cunit/raw_writer.rs compares the two field by field).
 *
 *     dump_test OUT_DIR PLUGIN.so
 *
 * Sets up the lower floors as ml_init and the constructor do (configuration from the environment,
 * the range, the stack table and its state (in MEMLENS_RUN_DIR when set), the modules), fills the
 * table with stacks of chosen frames and counts (the edges included: counts past i64, negative live
 * counts, empty stacks, 128 frames), the header's counters, the views' figures and timeline points,
 * loads and dlcloses PLUGIN.so, and writes OUT_DIR/first.raw (reason ctl) and, after changing some
 * counts, OUT_DIR/second.raw (reason exit). On stdout, a line per fact as the writer found it in
 * memory (what the dump must say, by runtime/README.md's rules):
 *
 *     exe <hex of the path>       pid N       ppid N      config <interval> <unwinder> <active>
 *     start_ns N                  time <ns before> <ns after>  (per dump: dump 1|2 precedes)
 *     counters <truncated> <dropped> <unwind_fallbacks> <max_depth> <dropped_bytes> <max_stacks>
 *              <table_full> <untracked>
 *     cost <cost_ns> <cost_calls> <cpu_ns before> <cpu_ns after>
 *     stack <samples> <alloc_fx> <alloc_bytes> <inuse_fx> <inuse_bytes> <flags> <pc…>   (raw values)
 *     life <peak_fx> <peak_bytes> <age lo> <age hi> <prev_inuse> <freed × 10>
 *     module <base> <loaded|unloaded> <hex of path> / segment <vaddr> <memsz> <offset> <rwx>
 *     views <enabled> <heap> <heap_max> <snap_heap> <snap_ns> <allocator>
 *     tl <ns> <heap> <rss> <in_use> <footprint> <mmap> / tl-dump <ns lo> <ns hi> <heap>
 *     maps <hex of /proc/self/maps read just before the dump>
 */
#define _GNU_SOURCE
#define UNIT_NO_MAIN
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>
#include <x86intrin.h>

#include "../../src/base/config.h"
#include "../../src/control/dump.h"
#include "../../src/record/peak.h"
#include "../../src/record/range.h"
#include "../../src/sample/clock.h"
#include "../../src/sample/cost.h"
#include "../../src/store/modules.h"
#include "../../src/store/stacks.h"
#include "../../src/store/state.h"
#include "unit.h"

#define NSTACKS 300

static void hex(const char *key, const void *p, size_t n)
{
    printf("%s ", key);
    for (size_t i = 0; i < n; i++)
        printf("%02x", ((const unsigned char *)p)[i]);
    printf("%s\n", n ? "" : "-");
}

static uint32_t ids[NSTACKS];
static uint64_t anchor;

/* Stack k: its frames and whether it is truncated. */
static int frames(int k, uintptr_t *pcs, int *trunc)
{
    struct unit_rng r = {(uint64_t)k * 7919 + 1};
    int depth = k == 0 ? 0 : k == 1 ? ML_MAX_DEPTH : 1 + (int)unit_below(&r, 64);
    for (int i = 0; i < depth; i++)
        pcs[i] = k == 2 && i == 0 ? UINTPTR_MAX : unit_below(&r, 4) ? 0x400000 + unit_below(&r, 1u << 30) : unit_next(&r);
    *trunc = (int)unit_below(&r, 2);
    return depth;
}

/* Counts for stack k, edges on purpose: k % 10 == 3 counts nothing (the writer skips it), 4 has a
 * live count below zero, 5 cumulative counts beyond i64, 6 only live counts. */
static void set_counts(struct ml_stack *s, int k, int round)
{
    struct unit_rng r = {(uint64_t)k * 31 + (uint64_t)round * 1000003 + 5};
    uint64_t samples = 1 + unit_below(&r, 1000);
    atomic_store(&s->samples, k % 10 == 3 || k % 10 == 6 ? 0 : samples);
    atomic_store(&s->alloc_fx, k % 10 == 5 ? UINT64_MAX - unit_below(&r, 9) : k % 10 == 3 || k % 10 == 6 ? 0 : samples * 65536 + unit_below(&r, 65536));
    atomic_store(&s->alloc_bytes, k % 10 == 5 ? (1ull << 63) + unit_below(&r, 99) : k % 10 == 3 || k % 10 == 6 ? 0 : samples * (1 + unit_below(&r, 1u << 20)));
    atomic_store(&s->inuse_fx, k % 10 == 3 ? 0 : k % 10 == 4 ? -(int64_t)unit_below(&r, 1000) - 1 : (int64_t)unit_below(&r, 1u << 30));
    atomic_store(&s->inuse_bytes, k % 10 == 3 ? 0 : k % 10 == 4 ? -5 : (int64_t)unit_below(&r, 1ull << 40));
    atomic_store(&s->peak_fx, (int64_t)unit_below(&r, 1u << 30));
    atomic_store(&s->peak_bytes, (int64_t)unit_below(&r, 1ull << 40));
    for (int i = 0; i < 10; i++)
        atomic_store(&s->life[i], unit_below(&r, 3) ? unit_below(&r, 1ull << 36) : 0);
    /* a live age for one stack in seven: blocks born in the first unit after the anchor */
    atomic_store(&s->age_w, k % 7 == 0 ? 1000 : 0);
    atomic_store(&s->age_sum, k % 7 == 0 ? 1000 * ml_age_units(anchor + 1, anchor) : 0);
}

static int64_t prev_inuse[NSTACKS];

static void print_stacks(int round, uint64_t tick0, uint64_t tick1)
{
    for (int k = 0; k < NSTACKS; k++) {
        struct ml_stack *s = ml_stack_get(ids[k]);
        printf("stack %llu %llu %llu %lld %lld %u", (unsigned long long)s->samples, (unsigned long long)s->alloc_fx,
               (unsigned long long)s->alloc_bytes, (long long)s->inuse_fx, (long long)s->inuse_bytes, s->flags);
        for (uint32_t i = 0; i < s->depth; i++)
            printf(" 0x%llx", (unsigned long long)s->pcs[i]);
        uint64_t lo = 0, hi = 0;
        if (s->age_w > 0) {
            uint64_t born = s->age_sum / (uint64_t)s->age_w;
            lo = (ml_age_units(tick0, anchor) - born) << ML_AGE_SHIFT;
            hi = (ml_age_units(tick1, anchor) - born) << ML_AGE_SHIFT;
        }
        printf("\nlife %lld %lld %llu %llu %lld", (long long)s->peak_fx, (long long)s->peak_bytes,
               (unsigned long long)lo, (unsigned long long)hi, (long long)(round == 1 ? 0 : prev_inuse[k]));
        for (int i = 0; i < 10; i++)
            printf(" %llu", (unsigned long long)s->life[i]);
        printf("\n");
        prev_inuse[k] = s->inuse_bytes < 0 ? 0 : s->inuse_bytes;
    }
}

/* A module as the dump must list it; arg: NULL for every loaded one, else the base of the one to
 * print as unloaded. */
static int print_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    if (arg && info->dlpi_addr != *(uintptr_t *)arg)
        return 0;
    char exe[4096];
    const char *path = info->dlpi_name;
    if (!path || !*path) { /* the main program: the dump names it by /proc/self/exe */
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        path = exe;
    }
    int loads = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        loads += info->dlpi_phdr[i].p_type == PT_LOAD;
    if (!loads)
        return 0;
    printf("module 0x%llx %s ", (unsigned long long)info->dlpi_addr, arg ? "unloaded" : "loaded");
    hex("", path, strlen(path));
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD)
            printf("segment 0x%llx 0x%llx 0x%llx %c%c%c\n", (unsigned long long)ph->p_vaddr,
                   (unsigned long long)ph->p_memsz, (unsigned long long)ph->p_offset, ph->p_flags & PF_R ? 'r' : '-',
                   ph->p_flags & PF_W ? 'w' : '-', ph->p_flags & PF_X ? 'x' : '-');
    }
    return 0;
}

/* The plugin: loaded, its module printed as it will be remembered, then dlclose'd. */
static void load_and_unload(const char *plugin)
{
    void *h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dump_test: dlopen %s: %s\n", plugin, dlerror());
        exit(2);
    }
    struct link_map *lm;
    dlinfo(h, RTLD_DI_LINKMAP, &lm);
    uintptr_t base = lm->l_addr;
    dl_iterate_phdr(print_module, &base);
    ml_modules_unloading(h); /* what the dlclose interposer does (process/dlclose.c) */
    dlclose(h);
}

static char maps[1 << 20];

static size_t read_maps(void)
{
    int fd = open("/proc/self/maps", O_RDONLY);
    size_t n = 0;
    ssize_t r;
    while (fd >= 0 && (r = read(fd, maps + n, sizeof maps - n)) > 0)
        n += (size_t)r;
    close(fd);
    return n;
}

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void one_dump(const char *dir, int round)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.raw", dir, round == 1 ? "first" : "second");
    printf("dump %d\n", round);
    uint64_t c0, c1, ns0, ns1, calls, cost;
    ml_cost_get(&cost, &calls, &c0);
    (void)c0;
    c0 = cpu_ns();
    fflush(stdout);
    size_t n = read_maps();
    ns0 = ml_now_ns();
    uint64_t t0 = __rdtsc();
    int rc = ml_dump(path, round == 1 ? "ctl" : "exit");
    uint64_t t1 = __rdtsc();
    ns1 = ml_now_ns();
    c1 = cpu_ns();
    if (rc != 0) {
        fprintf(stderr, "dump_test: ml_dump %s: %d\n", path, rc);
        exit(2);
    }
    printf("time %llu %llu\n", (unsigned long long)ns0, (unsigned long long)ns1);
    printf("cost %llu %llu %llu %llu\n", (unsigned long long)cost, (unsigned long long)calls,
           (unsigned long long)c0, (unsigned long long)c1);
    print_stacks(round, t0, t1);
    printf("tl-dump %llu %llu %lld\n", (unsigned long long)ns0, (unsigned long long)ns1, (long long)ml_heap_now());
    hex("maps", maps, n);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: dump_test OUT_DIR PLUGIN.so\n");
        return 2;
    }
    /* ml_init's and the constructor's order (intercept/boot.c, process/init.c) */
    ml_config_read();
    if (ml_range_init() != 0 || ml_stacks_init() != 0)
        return 2;
    ml_cfg.pid = getpid();
    ml_cfg.start_ns = ml_now_ns();
    ml_state_modules_init();
    ml_cfg.ready = 1;
    anchor = ml_views_anchor();

    for (int k = 0; k < NSTACKS; k++) {
        uintptr_t pcs[ML_MAX_DEPTH];
        int trunc, depth = frames(k, pcs, &trunc);
        ids[k] = ml_stack_intern(pcs, depth, trunc);
        if (ids[k] == ML_NO_STACK)
            return 2;
        set_counts(ml_stack_get(ids[k]), k, 1);
    }
    atomic_store(&ml_st->truncated, 11);
    atomic_store(&ml_st->dropped, 22);
    atomic_store(&ml_st->unwind_fallbacks, 33);
    atomic_store(&ml_st->dropped_bytes, 44);
    atomic_store(&ml_st->untracked, 55);
    /* the views: the heap and its peak as peak.c keeps them, and three timeline points */
    atomic_store(&ml_st->heap, 123456789);
    ml_st->heap_max = 987654321;
    ml_st->heap_max_tick = 0;
    atomic_store(&ml_st->snap_heap, 555555);
    atomic_store(&ml_st->snap_ns, 1700000000123456789ull);
    atomic_store(&ml_st->snapped, 1);
    const struct ml_state_point pts[3] = {
        {1700000000000000000ull, 1, 2, 3, 4, 5}, {1700000000100000000ull, 4096, 1 << 20, -1, -1, 0},
        {1700000000200000000ull, INT64_MAX, INT64_MAX, 0, 0, INT64_MAX}};
    if (ml_state_points_room(4) != 0)
        return 2;
    for (int i = 0; i < 3; i++)
        ml_st_points[i] = pts[i];
    atomic_store(&ml_st->npoints, 3);
    load_and_unload(argv[2]);

    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    hex("exe", exe, n > 0 ? (size_t)n : 0);
    printf("pid %d\nppid %d\n", getpid(), getppid());
    printf("config %llu %s %d\n", (unsigned long long)ml_cfg.interval, ml_unwinder_name(ml_cfg.unwinder),
           atomic_load(&ml_cfg.active));
    printf("start_ns %llu\n", (unsigned long long)ml_cfg.start_ns);
    printf("counters 11 22 33 %d 44 %u %llu 55\n", ml_cfg.max_depth, ml_stacks_max(),
           (unsigned long long)ml_stacks_full_drops());
    dl_iterate_phdr(print_module, NULL);
    printf("views %d %lld %lld %llu %llu unknown\n", atomic_load(&ml_views_on), (long long)ml_heap_now(),
           (long long)ml_st->heap_max, (unsigned long long)ml_st->snap_heap, (unsigned long long)ml_st->snap_ns);
    for (int i = 0; i < 3; i++)
        printf("tl %llu %lld %lld %lld %lld %lld\n", (unsigned long long)pts[i].ns, (long long)pts[i].heap,
               (long long)pts[i].rss, (long long)pts[i].in_use, (long long)pts[i].footprint,
               (long long)pts[i].mmap);

    one_dump(argv[1], 1);
    for (int k = 0; k < NSTACKS; k += 2) /* the second dump: other counts, and growth since the first */
        set_counts(ml_stack_get(ids[k]), k, 2);
    one_dump(argv[1], 2);
    return 0;
}
