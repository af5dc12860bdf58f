/* A process that lies about its modules, as any local user's process can: it renames, in its own
 * link map (what dl_iterate_phdr reports, so what the runtime writes into a dump), the C library to
 * /dev/zero and a library it loaded to a FIFO. Then it holds 64 MiB allocated through that library
 * and allocates a little more until DIR/stop appears. `honest` keeps the names.
 *
 *   lying_modules LIB FIFO DIR [honest]     writes its pid to DIR/ready when it holds the 64 MiB */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say_ready(const char *dir)
{
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/ready", dir);
    snprintf(tmp, sizeof tmp, "%s/ready.tmp", dir);
    FILE *f = fopen(tmp, "w");
    if (!f)
        exit(1);
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    rename(tmp, path);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: lying_modules LIB FIFO DIR [honest]\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    void *(*alloc)(size_t) = (void *(*)(size_t))dlsym(lib, "lie_alloc");
    if (argc == 4) {
        struct link_map *m = NULL;
        dlinfo(lib, RTLD_DI_LINKMAP, &m);
        while (m && m->l_prev)
            m = m->l_prev;
        for (; m; m = m->l_next) {
            if (strstr(m->l_name, "libc.so"))
                m->l_name = "/dev/zero";
            else if (strstr(m->l_name, "liblie"))
                m->l_name = argv[2];
        }
    }
    static void *held[1024];
    for (int i = 0; i < 1024; i++)
        held[i] = alloc(64 << 10);
    say_ready(argv[3]);
    char stop[4096];
    snprintf(stop, sizeof stop, "%s/stop", argv[3]);
    while (access(stop, F_OK) != 0) {
        free(alloc(4096));
        usleep(10000);
    }
    printf("lying_modules done\n");
    return 0;
}
