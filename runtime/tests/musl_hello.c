/* A program built with musl-gcc (tests/e2e/reach.rs): it allocates, prints one line and exits 7, so
 * the test sees that it ran to its end and that its exit code came back through `memlens run`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    char *p = malloc(64);
    if (!p)
        return 1;
    strcpy(p, "musl program ran");
    printf("%s with %d arguments\n", p, argc - 1);
    free(p);
    (void)argv;
    return 7;
}
