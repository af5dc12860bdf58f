/* The private address range: sampled blocks and the boot arena live here, so free() recognises them
 * with one unsigned compare and never touches an unsampled block.
 *
 * Layout: [boot arena | chunks...]. Chunks are powers of two (64 B .. the whole range) served from a
 * bump pointer and recycled through per-class free lists. The range is reserved PROT_NONE with
 * MAP_NORESERVE and made read-write in 2 MiB steps as the bump pointer advances. Sampling is rare
 * (one block per interval R), so one spin lock is enough here. */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#include "rt.h"

#define RANGE_SIZE (64ull << 30)
#define BOOT_SIZE (256u << 10)
#define COMMIT_STEP (2u << 20)
#define MIN_CLASS 6
#define NCLASS 40
#define HDR sizeof(struct ml_block)

uintptr_t ml_range_base, ml_range_span;
static uintptr_t boot_used;         /* bytes of the boot arena handed out */
static uintptr_t bump = BOOT_SIZE;  /* offset of the first never-used byte */
static uintptr_t committed;         /* offset up to which the range is read-write */
static void *free_list[NCLASS];
static _Atomic int lock;
static char fallback_boot[BOOT_SIZE] __attribute__((aligned(64)));

_Static_assert(sizeof(struct ml_block) % 16 == 0, "header keeps 16-byte alignment");

void ml_range_lock(void)
{
    while (atomic_exchange_explicit(&lock, 1, memory_order_acquire))
        sched_yield();
}

void ml_range_unlock(void) { ml_spin_unlock(&lock); }
void ml_range_reset_lock(void) { atomic_store(&lock, 0); }

int ml_range_init(void)
{
    void *p = mmap(NULL, RANGE_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED || mprotect(p, BOOT_SIZE, PROT_READ | PROT_WRITE) != 0) {
        /* Keep the boot arena working (dlsym needs it) from a static buffer; sampling stays off. */
        if (p != MAP_FAILED)
            munmap(p, RANGE_SIZE);
        ml_range_base = (uintptr_t)fallback_boot;
        ml_range_span = BOOT_SIZE;
        bump = committed = BOOT_SIZE;
        return -1;
    }
    committed = BOOT_SIZE;
    ml_range_base = (uintptr_t)p;
    ml_range_span = RANGE_SIZE;
    return 0;
}

/* Memory for allocations made while dlsym runs inside ml_init. Never freed; zeroed. */
void *ml_boot_alloc(size_t size)
{
    size_t need = (HDR + size + 15) & ~(size_t)15;
    void *user = NULL;
    ml_range_lock();
    if (size < BOOT_SIZE && boot_used + need <= BOOT_SIZE) {
        struct ml_block *b = (struct ml_block *)(ml_range_base + boot_used);
        boot_used += need;
        b->kind = ML_KIND_BOOT;
        b->size = size;
        user = b + 1;
    }
    ml_range_unlock();
    return user;
}

static unsigned class_of(size_t need)
{
    unsigned c = need <= (1u << MIN_CLASS) ? MIN_CLASS : 64 - (unsigned)__builtin_clzll(need - 1);
    return c;
}

/* A chunk of class c, or 0. Called with the lock held. */
static uintptr_t chunk_get(unsigned c)
{
    if (free_list[c]) {
        void *p = free_list[c];
        free_list[c] = ((void **)p)[1];
        return (uintptr_t)p;
    }
    uintptr_t size = (uintptr_t)1 << c;
    if (bump + size > ml_range_span || bump + size < bump)
        return 0;
    if (bump + size > committed) {
        uintptr_t want = (bump + size + COMMIT_STEP - 1) & ~(uintptr_t)(COMMIT_STEP - 1);
        if (want > ml_range_span)
            want = ml_range_span;
        if (mprotect((void *)(ml_range_base + committed), want - committed, PROT_READ | PROT_WRITE) != 0)
            return 0;
        committed = want;
    }
    uintptr_t off = bump;
    bump += size;
    return ml_range_base + off;
}

void *ml_range_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    if (size > (RANGE_SIZE >> 1) || align > (RANGE_SIZE >> 4))
        return NULL;
    size_t need = HDR + size + (align - 16);
    unsigned c = class_of(need);
    if (c >= NCLASS)
        return NULL;
    ml_range_lock();
    uintptr_t chunk = chunk_get(c);
    ml_range_unlock();
    if (!chunk)
        return NULL;
    uintptr_t user = (chunk + HDR + align - 1) & ~(uintptr_t)(align - 1);
    struct ml_block *b = (struct ml_block *)user - 1;
    b->kind = ML_KIND_SAMPLED;
    b->cls = (uint16_t)c;
    b->size = size;
    b->off = user - chunk;
    return (void *)user;
}

void ml_range_free(void *p)
{
    struct ml_block *b = ml_block_of(p);
    unsigned c = b->cls;
    uintptr_t chunk = (uintptr_t)p - b->off;
    b->kind = 0; /* a second free of the same pointer is then ignored rather than corrupting the list */
    /* Give big chunks' pages back to the kernel; keep the address range for reuse. */
    if (c >= 18) {
        uintptr_t from = (chunk + 4096 + 4095) & ~(uintptr_t)4095;
        uintptr_t to = (chunk + ((uintptr_t)1 << c)) & ~(uintptr_t)4095; /* never touch a neighbour's page */
        if (to > from)
            madvise((void *)from, to - from, MADV_DONTNEED);
    }
    ml_range_lock();
    ((void **)chunk)[1] = free_list[c]; /* [1]: keep the header's kind word intact */
    free_list[c] = (void *)chunk;
    ml_range_unlock();
}
