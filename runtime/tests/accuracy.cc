// Accuracy program for the memlens runtime: allocation sites with known byte totals, through every
// allocation entry point, on two threads. It prints its own exact per-site totals as
//   site <name> <bytes> <count>
//   held <bytes>         (bytes still allocated at exit, all from site_held)
// so a test can compare them with the profile. Each site is a noinline function that allocates
// directly (its frame is the caller of malloc / operator new).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#define SITE extern "C" __attribute__((noinline))

static void *volatile sink; // keeps the compiler from dropping allocations

struct Totals {
    uint64_t bytes = 0, count = 0;
    void add(size_t n) { bytes += n; count++; }
};

// Sizes cycle through a small set so blocks below and above the interval both occur.
static size_t size_at(unsigned i, size_t base) { return base + (i % 7) * (base / 8); }

// Each site stores its block before returning, so the call is not a tail call and the site's own
// frame is on the stack when malloc runs.
SITE void *site_malloc(size_t n) { void *p = malloc(n); sink = p; return p; }
SITE void *site_calloc(size_t n) { void *p = calloc(n / 16, 16); sink = p; return p; }
SITE void *site_realloc(void *q, size_t n) { void *p = realloc(q, n); sink = p; return p; }
SITE void *site_memalign(size_t n) {
    void *p = nullptr;
    if (posix_memalign(&p, 64, n) != 0)
        return nullptr;
    sink = p;
    return p;
}
SITE void *site_aligned(size_t n) { void *p = aligned_alloc(4096, (n + 4095) & ~size_t(4095)); sink = p; return p; }
SITE char *site_new(size_t n) { char *p = new char[n]; sink = p; return p; }
SITE void *site_small(size_t n) { void *p = malloc(n); sink = p; return p; }
SITE void *site_held(size_t n) { void *p = malloc(n); sink = p; return p; }

static Totals t_malloc, t_calloc, t_realloc, t_memalign, t_aligned, t_new, t_small, t_held;

// Thread A: malloc, calloc, realloc, small blocks.
static void thread_a(unsigned rounds) {
    for (unsigned i = 0; i < rounds; i++) {
        size_t n = size_at(i, 96 << 10);
        void *p = site_malloc(n);
        t_malloc.add(n);
        sink = p;
        free(p);

        n = size_at(i + 3, 64 << 10);
        n &= ~size_t(15);
        p = site_calloc(n);
        t_calloc.add(n);
        sink = p;
        free(p);

        // realloc growing a buffer in steps: each call counts its new size.
        void *r = nullptr;
        for (size_t k = 1; k <= 4; k++) {
            size_t m = k * (24 << 10);
            r = site_realloc(r, m);
            t_realloc.add(m);
        }
        sink = r;
        free(r);

        for (int k = 0; k < 8; k++) {
            void *s = site_small(64);
            t_small.add(64);
            sink = s;
            free(s);
        }
    }
}

// Thread B: posix_memalign, aligned_alloc, operator new[].
static void thread_b(unsigned rounds) {
    for (unsigned i = 0; i < rounds; i++) {
        size_t n = size_at(i + 1, 80 << 10);
        void *p = site_memalign(n);
        t_memalign.add(n);
        sink = p;
        free(p);

        n = (size_at(i + 5, 56 << 10) + 4095) & ~size_t(4095);
        p = site_aligned(n);
        t_aligned.add(n);
        sink = p;
        free(p);

        n = size_at(i + 2, 88 << 10);
        char *c = site_new(n);
        t_new.add(n);
        sink = c;
        delete[] c;
    }
}

int main(int argc, char **argv) {
    unsigned rounds = argc > 1 ? (unsigned)atoi(argv[1]) : 12000;
    std::thread a(thread_a, rounds), b(thread_b, rounds);
    a.join();
    b.join();
    // Blocks still held at exit: large enough that the live estimate is tight.
    static std::vector<void *> held;
    for (int i = 0; i < 48; i++) {
        size_t n = (size_t)(2 + i % 3) << 20;
        held.push_back(site_held(n));
        t_held.add(n);
    }
    struct { const char *name; Totals *t; } sites[] = {
        {"site_malloc", &t_malloc}, {"site_calloc", &t_calloc},   {"site_realloc", &t_realloc},
        {"site_memalign", &t_memalign}, {"site_aligned", &t_aligned}, {"site_new", &t_new},
        {"site_small", &t_small},   {"site_held", &t_held},
    };
    for (auto &s : sites)
        printf("site %s %llu %llu\n", s.name, (unsigned long long)s.t->bytes, (unsigned long long)s.t->count);
    printf("held %llu\n", (unsigned long long)t_held.bytes);
    return 0;
}
