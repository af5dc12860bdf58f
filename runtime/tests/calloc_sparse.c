/* calloc(1, 4 GiB), then touch 16 pages: memory that is never written must not become resident.
 * Prints the sum of the touched bytes (0) and the peak RSS in KiB. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

int main(void)
{
    size_t size = 4ull << 30;
    unsigned char *p = calloc(1, size);
    if (!p) {
        printf("calloc failed\n");
        return 1;
    }
    unsigned long sum = 0;
    for (int i = 0; i < 16; i++)
        sum += p[(size / 16) * (size_t)i + 4096];
    p[size - 1] = 1;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("sum %lu\nmaxrss_kib %ld\n", sum, ru.ru_maxrss);
    free(p);
    return 0;
}
