/* MiniDebugInfo (`.gnu_debugdata`, as Fedora and others ship it): an xz-compressed ELF holding the
 * `.symtab` of the functions a stripped file keeps no symbols for. Decoded with the system's liblzma,
 * loaded with dlopen when first needed (the runtime links nothing it may not find in a container),
 * through an allocator of our own: liblzma's default would call the malloc we interpose. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <sys/mman.h>

#include "elfsym.h"
#include "finder.h"

/* The part of lzma.h we use (liblzma 5's stable ABI). */
struct lzma_allocator {
    void *(*alloc)(void *opaque, size_t nmemb, size_t size);
    void (*free)(void *opaque, void *ptr);
    void *opaque;
};
typedef int (*buffer_decode_fn)(uint64_t *memlimit, uint32_t flags, const struct lzma_allocator *a,
                                const uint8_t *in, size_t *in_pos, size_t in_size, uint8_t *out,
                                size_t *out_pos, size_t out_size);

/* Each allocation is a mapping of its own with its length in front: liblzma makes a handful. */
static void *xz_alloc(void *opaque, size_t nmemb, size_t size)
{
    (void)opaque;
    size_t n;
    if (__builtin_mul_overflow(nmemb, size, &n) || n > ((size_t)1 << 40))
        return NULL;
    size_t *p = mmap(NULL, n + 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    p[0] = n + 16;
    return (char *)p + 16;
}

static void xz_free(void *opaque, void *ptr)
{
    (void)opaque;
    if (ptr) {
        size_t *p = (size_t *)((char *)ptr - 16);
        munmap(p, p[0]);
    }
}

static buffer_decode_fn decoder(void)
{
    static buffer_decode_fn fn;
    static int tried;
    if (!tried) {
        /* Inside the loader (a library being loaded, finder.h), only a liblzma already there. */
        tried = !ml_loader_context;
        void *h = dlopen("liblzma.so.5", RTLD_NOW | RTLD_LOCAL | (ml_loader_context ? RTLD_NOLOAD : 0));
        fn = h ? (buffer_decode_fn)dlsym(h, "lzma_stream_buffer_decode") : NULL;
    }
    return fn;
}

void *ml_xz_decode(const uint8_t *in, size_t n, size_t *len)
{
    *len = 0;
    buffer_decode_fn fn = decoder();
    if (!fn)
        return NULL;
    *len = 1;
    /* The symbol table of a compressed ELF is rarely more than 20 times its size; the mapping is
     * reserved, not touched, beyond what the decoder writes. */
    size_t cap = n * 32 + (1 << 20);
    if (cap > ((size_t)256 << 20))
        cap = (size_t)256 << 20;
    uint8_t *out = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (out == MAP_FAILED)
        return NULL;
    struct lzma_allocator a = {xz_alloc, xz_free, NULL};
    uint64_t memlimit = (uint64_t)256 << 20;
    size_t in_pos = 0, out_pos = 0;
    if (fn(&memlimit, 0, &a, in, &in_pos, n, out, &out_pos, cap) != 0 || out_pos == 0) {
        munmap(out, cap);
        return NULL;
    }
    munmap(out + ((out_pos + 4095) & ~(size_t)4095), cap - ((out_pos + 4095) & ~(size_t)4095));
    mprotect(out, out_pos, PROT_READ);
    *len = out_pos;
    return out;
}
