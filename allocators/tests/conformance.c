/* Malloc-family conformance suite, run under LD_PRELOAD against every allocator memlens benchmarks
 * (glibc, the reference allocators, the distribution's). It checks what programs rely on: alignment,
 * realloc keeping contents, calloc zeroing and overflow, usable size, zero and huge sizes, and frees
 * from a thread other than the allocating one. Prints one line per failure and a summary; exit 1 on
 * any failure (deviations alone exit 0; the caller decides whether to accept them).
 * Build with -fno-builtin so the compiler cannot fold calls such as malloc(SIZE_MAX) away. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks, failures, deviations;

#define CHECK(cond, ...)                                                                                 \
    do {                                                                                                 \
        checks++;                                                                                        \
        if (!(cond)) {                                                                                   \
            failures++;                                                                                  \
            printf("FAIL %s:%d: ", __func__, __LINE__);                                                  \
            printf(__VA_ARGS__);                                                                         \
            printf("\n");                                                                                \
        }                                                                                                \
    } while (0)

/* A deviation: the allocator works but breaks a POSIX detail programs rarely depend on (errno after a
 * failed allocation, a deprecated function left to glibc). Reported, counted apart from failures. */
#define DEVIATION(cond, ...)                                                                             \
    do {                                                                                                 \
        checks++;                                                                                        \
        if (!(cond)) {                                                                                   \
            deviations++;                                                                                \
            printf("DEVIATION %s:%d: ", __func__, __LINE__);                                             \
            printf(__VA_ARGS__);                                                                         \
            printf("\n");                                                                                \
        }                                                                                                \
    } while (0)

/* True when `name` resolves to the same object as malloc: the preloaded allocator replaced it. If it
 * did not, glibc's version would hand out memory the allocator's free() cannot take back. */
static int replaced(const char *name)
{
    Dl_info a, b;
    void *f = dlsym(RTLD_DEFAULT, name), *m = dlsym(RTLD_DEFAULT, "malloc");
    if (!f || !m || !dladdr(f, &a) || !dladdr(m, &b))
        return 0;
    return strcmp(a.dli_fname, b.dli_fname) == 0;
}

/* The alignment C requires for an object of n bytes: the largest power of two not above n, capped at
 * alignof(max_align_t); a 1-byte object can hold no type that needs more. */
static size_t required_alignment(size_t n)
{
    size_t a = 1;
    while (a * 2 <= n && a < 16)
        a *= 2;
    return a;
}

/* Sizes across every regime: tiny, small classes, page-ish, large (mmap territory). */
static const size_t sizes[] = {1, 7, 16, 24, 100, 128, 1000, 1024, 4095, 4096, 65536, 200000, 1 << 20, 9 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31u + seed);
}

static int intact(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31u + seed))
            return 0;
    return 1;
}

static void test_alignment(void)
{
    for (size_t i = 0; i < NSIZES; i++) {
        void *p = malloc(sizes[i]);
        size_t a = required_alignment(sizes[i]);
        CHECK(p && (uintptr_t)p % a == 0, "malloc(%zu) = %p not %zu-aligned", sizes[i], p, a);
        free(p);
    }
    for (size_t a = sizeof(void *); a <= (1 << 16); a <<= 1) {
        for (size_t i = 0; i < NSIZES; i += 3) {
            void *p = NULL;
            int rc = posix_memalign(&p, a, sizes[i]);
            CHECK(rc == 0 && p && (uintptr_t)p % a == 0, "posix_memalign(%zu, %zu) rc=%d p=%p", a, sizes[i], rc, p);
            if (p)
                memset(p, 1, sizes[i]);
            free(p);
            /* An allocator that leaves aligned_alloc to glibc gets glibc's blocks in its free():
             * one failure, said once, instead of the crash it would be in a program. */
            if (replaced("aligned_alloc")) {
                p = aligned_alloc(a, sizes[i]);
                CHECK(p && (uintptr_t)p % a == 0, "aligned_alloc(%zu, %zu) = %p", a, sizes[i], p);
                if (p)
                    CHECK(malloc_usable_size(p) >= sizes[i], "aligned usable size too small");
                free(p);
            }
            p = memalign(a, sizes[i]);
            CHECK(p && (uintptr_t)p % a == 0, "memalign(%zu, %zu) = %p", a, sizes[i], p);
            free(p);
        }
    }
    CHECK(replaced("aligned_alloc"), "aligned_alloc is not replaced: its blocks (glibc's) would reach this allocator's free");
    long page = sysconf(_SC_PAGESIZE);
    void *v = valloc(100);
    CHECK(v && (uintptr_t)v % (uintptr_t)page == 0, "valloc(100) = %p", v);
    free(v);
    DEVIATION(replaced("pvalloc"), "pvalloc is not replaced (glibc's would be used; not tested)");
    if (replaced("pvalloc")) {
        v = pvalloc(100);
        CHECK(v && (uintptr_t)v % (uintptr_t)page == 0 && malloc_usable_size(v) >= (size_t)page, "pvalloc(100) = %p", v);
        free(v);
    }
    void *p = (void *)1;
    CHECK(posix_memalign(&p, 24, 10) == EINVAL, "posix_memalign with alignment 24 must fail with EINVAL");
    CHECK(posix_memalign(&p, 2, 10) == EINVAL, "posix_memalign with alignment 2 must fail with EINVAL");
}

static void test_realloc(void)
{
    /* Grow one block through every regime, checking the old contents each time. */
    size_t n = 8;
    unsigned char *p = malloc(n);
    fill(p, n, 5);
    for (size_t i = 0; i < NSIZES; i++) {
        if (sizes[i] <= n)
            continue;
        unsigned char *q = realloc(p, sizes[i]);
        CHECK(q != NULL, "realloc grow to %zu failed", sizes[i]);
        if (!q)
            break;
        CHECK(intact(q, n, 5), "realloc grow %zu -> %zu lost contents", n, sizes[i]);
        p = q;
        n = sizes[i];
        fill(p, n, 5);
    }
    /* And shrink it back down. */
    for (size_t i = NSIZES; i-- > 0;) {
        if (sizes[i] >= n)
            continue;
        unsigned char *q = realloc(p, sizes[i]);
        CHECK(q != NULL, "realloc shrink to %zu failed", sizes[i]);
        if (!q)
            break;
        CHECK(intact(q, sizes[i], 5), "realloc shrink %zu -> %zu lost contents", n, sizes[i]);
        p = q;
        n = sizes[i];
    }
    free(p);
    p = realloc(NULL, 100);
    CHECK(p != NULL, "realloc(NULL, 100) failed");
    free(p);
    /* realloc of an over-aligned block keeps contents too. */
    void *a = NULL;
    CHECK(posix_memalign(&a, 256, 300) == 0, "posix_memalign(256, 300)");
    fill(a, 300, 9);
    unsigned char *b = realloc(a, 5000);
    CHECK(b && intact(b, 300, 9), "realloc of an aligned block lost contents");
    free(b);
}

static void test_calloc(void)
{
    for (size_t i = 0; i < NSIZES; i++) {
        /* Dirty a block of this size first so a recycled block must really be zeroed. */
        unsigned char *d = malloc(sizes[i]);
        memset(d, 0xa5, sizes[i]);
        free(d);
        unsigned char *p = calloc(1, sizes[i]);
        CHECK(p != NULL, "calloc(1, %zu) failed", sizes[i]);
        size_t nz = 0;
        for (size_t j = 0; p && j < sizes[i]; j++)
            nz += p[j] != 0;
        CHECK(nz == 0, "calloc(1, %zu) left %zu non-zero bytes", sizes[i], nz);
        free(p);
    }
    volatile size_t big = SIZE_MAX / 2 + 2;
    errno = 0;
    void *p = calloc(big, 2);
    CHECK(p == NULL, "calloc overflow returned %p", p);
    DEVIATION(p != NULL || errno == ENOMEM, "calloc overflow left errno %d, not ENOMEM", errno);
    errno = 0;
    p = reallocarray(NULL, big, 4);
    CHECK(p == NULL, "reallocarray overflow returned %p", p);
    DEVIATION(p != NULL || errno == ENOMEM, "reallocarray overflow left errno %d, not ENOMEM", errno);
}

static void test_usable_and_zero(void)
{
    for (size_t i = 0; i < NSIZES; i++) {
        unsigned char *p = malloc(sizes[i]);
        size_t u = malloc_usable_size(p);
        CHECK(u >= sizes[i], "malloc_usable_size(malloc(%zu)) = %zu", sizes[i], u);
        memset(p, 0x5a, u); /* all of it must be writable */
        free(p);
    }
    CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) != 0");
    void *a = malloc(0), *b = malloc(0);
    CHECK(a == NULL || a != b, "malloc(0) returned the same pointer twice");
    free(a);
    free(b);
    free(NULL);
}

static void test_huge(void)
{
    volatile size_t huge[] = {SIZE_MAX, SIZE_MAX - 4096, (size_t)PTRDIFF_MAX + 1, (size_t)1 << 62};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        /* First in a child: an allocator that aborts on an impossible size (Hoard does) must show
         * as a failure here, not end the suite. */
        pid_t pid = fork();
        if (pid == 0)
            _exit(malloc(huge[i]) == NULL ? 0 : 1);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(pid > 0 && !WIFSIGNALED(status), "malloc(%zu) killed the process (signal %d)", huge[i],
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        if (pid <= 0 || WIFSIGNALED(status))
            continue;
        errno = 0;
        void *p = malloc(huge[i]);
        CHECK(p == NULL, "malloc(%zu) = %p", huge[i], p);
        DEVIATION(p != NULL || errno == ENOMEM, "malloc(%zu) left errno %d, not ENOMEM", huge[i], errno);
        void *q = NULL;
        int rc = posix_memalign(&q, 64, huge[i]);
        CHECK(rc == ENOMEM && q == NULL, "posix_memalign(64, %zu) rc=%d", huge[i], rc);
    }
    unsigned char *p = malloc(64);
    fill(p, 64, 3);
    errno = 0;
    /* Called through a pointer: the compiler would otherwise warn that p is used after realloc, which
     * is exactly what a failed realloc allows. */
    void *(*volatile realloc_fn)(void *, size_t) = realloc;
    void *q = realloc_fn(p, huge[0]);
    CHECK(q == NULL && intact(p, 64, 3), "realloc to SIZE_MAX must fail and keep the block");
    DEVIATION(q != NULL || errno == ENOMEM, "realloc to SIZE_MAX left errno %d, not ENOMEM", errno);
    free(p);
}

/* Cross-thread free: each producer allocates blocks, writes a pattern, and hands them to the next
 * thread, which checks the pattern and frees them. */
#define THREADS 4
#define ROUNDS 20000
static void *volatile mailbox[THREADS][64];

static void *cross_worker(void *arg)
{
    unsigned me = (unsigned)(uintptr_t)arg, to = (me + 1) % THREADS;
    long bad = 0;
    for (unsigned r = 0; r < ROUNDS; r++) {
        unsigned slot = r % 64;
        size_t n = sizes[(r + me) % 9];
        unsigned char *p = malloc(n);
        if (!p)
            return (void *)1;
        fill(p, n < 64 ? n : 64, me);
        void *old = __atomic_exchange_n(&mailbox[to][slot], p, __ATOMIC_ACQ_REL);
        /* What we displaced was allocated by thread (to - 1) = me; what lands in our own box came
         * from our predecessor. */
        free(old);
        void *in = __atomic_exchange_n(&mailbox[me][slot], NULL, __ATOMIC_ACQ_REL);
        if (in) {
            unsigned from = (me + THREADS - 1) % THREADS;
            bad += malloc_usable_size(in) == 0 || *(unsigned char *)in != (unsigned char)from;
            free(in);
        }
    }
    return (void *)bad;
}

static void test_cross_thread(void)
{
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, cross_worker, (void *)(uintptr_t)i);
    long bad = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    for (unsigned i = 0; i < THREADS; i++)
        for (unsigned s = 0; s < 64; s++)
            free(mailbox[i][s]);
    CHECK(bad == 0, "%ld cross-thread blocks were bad", bad);
}

int main(void)
{
    test_alignment();
    test_realloc();
    test_calloc();
    test_usable_and_zero();
    test_huge();
    test_cross_thread();
    printf("%d checks, %d failures, %d deviations\n", checks, failures, deviations);
    return failures ? 1 : 0;
}
