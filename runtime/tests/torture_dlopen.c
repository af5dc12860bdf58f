/* Torture: dlopen/dlclose in a loop. The plugin (built from this file with -DPLUGIN) allocates from
 * its own code, so some samples have frames in a library that is unloaded before the dump. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PLUGIN
void *volatile plugin_sink; /* the blocks escape, so the compiler cannot drop malloc/free pairs */

__attribute__((noinline)) unsigned long plugin_work(int rounds)
{
    unsigned long sum = 0;
    for (int i = 0; i < rounds; i++) {
        size_t n = 4096 + (size_t)(i % 32) * 8192;
        char *p = malloc(n);
        p[0] = (char)i;
        plugin_sink = p;
        sum += (unsigned char)p[0];
        free(p);
    }
    return sum;
}
#else
int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PLUGIN.so LOOPS\n", argv[0]);
        return 2;
    }
    int loops = atoi(argv[2]);
    unsigned long total = 0;
    for (int i = 0; i < loops; i++) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        unsigned long (*work)(int) = (unsigned long (*)(int))dlsym(h, "plugin_work");
        if (!work)
            return 1;
        total += work(200);
        if (dlclose(h) != 0)
            return 1;
    }
    printf("loops %d total %lu\n", loops, total);
    return 0;
}
#endif
