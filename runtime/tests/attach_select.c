/* An idle server for `memlens attach` (tests/e2e/attach.rs): the main thread blocks in select(), as
 * postgres's postmaster does in ServerLoop, with words pointing into the dynamic loader's code on its
 * stack (every glibc program's main thread keeps _dl_fini there, an argument of __libc_start_main).
 * A stack word is not a frame: the attach must go through.
 *
 *   attach_select DIR     writes DIR/pid once running, leaves when DIR/stop appears (or after 120 s)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

static int exists(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    /* ld.so's code, on this frame's stack, for as long as the program waits */
    volatile uintptr_t words[16];
    uintptr_t f = (uintptr_t)dlsym(RTLD_DEFAULT, "__tls_get_addr");
    for (int i = 0; i < 16; i++)
        words[i] = f + 16 * (uintptr_t)i;
    char *keep = malloc(1000);
    char p[4096];
    snprintf(p, sizeof p, "%s/pid", argv[1]);
    FILE *o = fopen(p, "w");
    fprintf(o, "%d\n", getpid());
    fclose(o);
    for (int i = 0; i < 1200 && !exists(argv[1], "stop"); i++) {
        struct timeval tv = {0, 100 * 1000};
        select(0, NULL, NULL, NULL, &tv);
        /* the postmaster allocates now and then between its waits */
        free(keep);
        keep = malloc(1000 + (size_t)(words[i % 16] & 0xff));
    }
    printf("%d\n", (int)(words[3] != 0));
    return 0;
}
