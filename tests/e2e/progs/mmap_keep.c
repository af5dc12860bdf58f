/* Keeps a 64 MiB anonymous mapping (at keep_mapping) and unmaps an 8 MiB one: the profile must show
 * the first at its call site as anonymous mmap, and not the second (tests/e2e/mmap.rs). With a
 * directory argument it then writes DIR/pid and waits for DIR/stop (the serve tests' protocol), so
 * that it is served while it holds the mapping. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
__attribute__((noinline)) void *keep_mapping(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 1, n);
    return p;
}
static void wait_for_stop(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/pid.tmp", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    char to[4096];
    snprintf(to, sizeof to, "%s/pid", dir);
    rename(path, to);
    snprintf(path, sizeof path, "%s/stop", dir);
    while (access(path, F_OK) != 0)
        usleep(20000);
}
int main(int argc, char **argv)
{
    void *p = keep_mapping(64u << 20);
    void *q = keep_mapping(8u << 20);
    munmap(q, 8u << 20);
    printf("%p\n", p);
    fflush(stdout);
    if (argc > 1)
        wait_for_stop(argv[1]);
    else
        sleep(1);
    return 0;
}
