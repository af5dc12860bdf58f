/* Uses the public C API (memlens.h) both ways it is documented: weak symbols and dlsym.
 *
 *   ctl_api [DUMP_PATH]
 *
 * Without the runtime it must run normally and exit 0 (prints "runtime: absent").
 * Under `memlens run --inactive` it starts sampling, allocates, dumps to DUMP_PATH, stops, and prints
 * what memlens_status() reports, one `key value` per line, for tests/e2e/ctl.rs to check. */
#define MEMLENS_WEAK
#include <memlens.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void *api_site(size_t n)
{
    char *p = malloc(n);
    if (p)
        p[0] = 1;
    return p;
}

static void allocate(int n)
{
    for (int i = 0; i < n; i++)
        free(api_site(4096));
}

static void print_status(const char *when)
{
    struct memlens_status st;
    if (memlens_status(&st) != 0) {
        printf("%s.status failed\n", when);
        return;
    }
    printf("%s.active %d\n%s.interval %llu\n%s.samples %llu\n", when, st.active, when,
           (unsigned long long)st.interval, when, (unsigned long long)st.samples);
}

int main(int argc, char **argv)
{
    /* dlsym pattern: works for any executable, finds the symbol only if the runtime is loaded. */
    int (*dl_start)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "memlens_start");
    /* weak-symbol pattern: the same answer. */
    int weak = memlens_start != NULL;
    if ((dl_start != NULL) != weak) {
        printf("mismatch: dlsym %p, weak %d\n", (void *)dl_start, weak);
        return 1;
    }
    if (!weak) {
        allocate(1000);
        printf("runtime: absent\n");
        return 0;
    }
    printf("runtime: present\n");
    print_status("before");
    memlens_set_interval(64 * 1024);
    printf("start.was %d\n", memlens_start());
    allocate(20000); /* 80 MB: every thread picks up the change within ~1 MiB */
    print_status("running");
    if (argc > 1)
        printf("dump %d\n", memlens_dump(argv[1]));
    if (argc > 1)
        printf("dump_again %d\n", memlens_dump(argv[1])); /* exists: -EEXIST, never overwritten */
    printf("stop.was %d\n", memlens_stop());
    printf("status_null %d\n", memlens_status(NULL));
    print_status("after");
    return 0;
}
