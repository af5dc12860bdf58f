/* A program that forks N children (default 300) one after the other; each allocates eight 1 MiB
 * blocks, keeps them and exits, so each leaves a profile of its own (`memlens run` must convert
 * them all within seconds of the program's end). */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 300;
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p < 0)
            return 1;
        if (p == 0) {
            for (int k = 0; k < 8; k++)
                memset(malloc(1 << 20), 1, 4096);
            exit(0);
        }
        waitpid(p, 0, 0);
    }
    return 0;
}
