/* The entry points memlens hooks on allocators linked into a program (hooks.c), by name, and the
 * hook functions that stand in front of them. finder.c finds them and patch.c hooks them. */
#ifndef MEMLENS_HOOKS_H
#define MEMLENS_HOOKS_H
#include "family.h"

#pragma GCC visibility push(hidden)

/* The shape of an entry point: its arguments, and what its hook does with them. */
enum hk_shape {
    SH_MALLOC,     /* void *(size_t n [, x])           p1: 1 zeroed, 2 page-aligned */
    SH_CALLOC,     /* void *(size_t n, size_t s [, x])  p1: 1 zeroed */
    SH_MEMALIGN,   /* void *(size_t align, size_t n) */
    SH_ALIGNED,    /* void *(size_t n, size_t align [, x]) p1: 1 zeroed */
    SH_CALLOC_AL,  /* void *(size_t n, size_t s, size_t align), zeroed */
    SH_POSIX,      /* int (void **out, size_t align, size_t n) */
    SH_MALLOCX,    /* void *(size_t n, int flags): jemalloc's flags (lg align, zero) */
    SH_REALLOC,    /* void *(void *p, size_t n)         p1: 1 zeroes what grows */
    SH_REALLOCN,   /* void *(void *p, size_t n, size_t s) p1: 1 zeroes what grows */
    SH_REALLOC_AL, /* void *(void *p, size_t n, size_t align) p1: 1 zeroes what grows */
    SH_RALLOCX,    /* void *(void *p, size_t n, int flags) */
    SH_STRDUP,     /* char *(const char *s [, size_t n]): a copy of a string, strlen + 1 bytes
                    * p1: 1 realpath(name, resolved): no allocation when resolved is given */
    /* mimalloc's first-class heaps: the heap first (a sampled block remembers it, block.c) */
    SH_HMALLOC,    /* void *(mi_heap_t *h, size_t n)      p1: 1 zeroed */
    SH_HCALLOC,    /* void *(h, size_t n, size_t s)        p1: 1 zeroed */
    SH_HALIGNED,   /* void *(h, size_t n, size_t align)    p1: 1 zeroed */
    SH_HCALLOC_AL, /* void *(h, size_t n, size_t s, size_t align), zeroed */
    SH_HSTRDUP,    /* char *(h, const char *s [, x]): as SH_STRDUP, in heap h */
    SH_HREALLOC,   /* void *(h, void *p, size_t n)         p1: 1 zeroes what grows */
    SH_HREALLOCN,  /* void *(h, void *p, size_t n, size_t s) p1: 1 zeroes what grows */
    SH_HREALLOC_AL, /* void *(h, void *p, size_t n, size_t align) p1: 1 zeroes what grows */
    SH_FREE,       /* void (void *p [, x, y]): free, sized and aligned frees, operator delete */
    SH_USABLE,     /* size_t (void *p [, x]) */
    SH_XALLOCX,    /* size_t (void *p, size_t n, size_t extra, int flags): resize in place */
    SH_EXPAND,     /* void *(void *p, size_t n): resize in place or NULL */
    /* Reallocating entry points that are only guarded (not counted): a block of ours handed to
     * them is moved (block.c, or into the allocator when an offset alignment is asked for) */
    SH_GREALLOC_AT,    /* void *(void *p, size_t n, size_t align, size_t offset) p1: 1 zeroes */
    SH_GRECALLOC_AL,   /* void *(void *p, size_t n, size_t s, size_t align), zeroes */
    SH_GRECALLOC_AT,   /* void *(void *p, size_t n, size_t s, size_t align, size_t offset), zeroes */
    SH_GHREALLOC_AT,   /* void *(h, void *p, size_t n, size_t align, size_t offset) p1: 1 zeroes */
    SH_GHRECALLOC_AL,  /* void *(h, void *p, size_t n, size_t s, size_t align), zeroes */
    SH_GHRECALLOC_AT,  /* void *(h, void *p, size_t n, size_t s, size_t align, size_t offset) */
    SH_HDESTROY,   /* void (mi_heap_t *h): frees every block of h (no free per block) */
    SH_HDELETE,    /* void (mi_heap_t *h): h's blocks move to the thread's backing heap, live */
    SH_HNEW,       /* mi_heap_t *(int tag, bool allow_destroy, arena): remembers a heap that
                    * mi_heap_destroy will only delete */
    SH_HNEW_ARENA, /* mi_heap_t *(arena): a heap mi_heap_destroy will only delete */
    SH_LOOKUP,     /* not hooked: its address is kept for the hooks to call (mi_heap_get_default) */
};

/* Which names a row is looked up under. */
enum hk_table { T_STD, T_MI, T_TC };

/* The rows: (id, table, name without prefix, shape, p1). STD is looked up bare (an allocator that
 * defines malloc itself) and with jemalloc's prefixes `je_` and `_rjem_`; MI with `mi_`, TC with
 * `tc_`. */
#define HK_ROWS(X, S)                                                                                  \
    X(S, STD_malloc, T_STD, "malloc", SH_MALLOC, 0)                                                    \
    X(S, STD_calloc, T_STD, "calloc", SH_CALLOC, 1)                                                    \
    X(S, STD_realloc, T_STD, "realloc", SH_REALLOC, 0)                                                 \
    X(S, STD_free, T_STD, "free", SH_FREE, 0)                                                          \
    X(S, STD_cfree, T_STD, "cfree", SH_FREE, 0)                                                        \
    X(S, STD_posix_memalign, T_STD, "posix_memalign", SH_POSIX, 0)                                     \
    X(S, STD_aligned_alloc, T_STD, "aligned_alloc", SH_MEMALIGN, 0)                                    \
    X(S, STD_memalign, T_STD, "memalign", SH_MEMALIGN, 0)                                              \
    X(S, STD_valloc, T_STD, "valloc", SH_MALLOC, 2)                                                    \
    X(S, STD_pvalloc, T_STD, "pvalloc", SH_MALLOC, 2)                                                  \
    X(S, STD_malloc_usable_size, T_STD, "malloc_usable_size", SH_USABLE, 0)                            \
    X(S, STD_malloc_size, T_STD, "malloc_size", SH_USABLE, 0)                                          \
    X(S, STD_mallocx, T_STD, "mallocx", SH_MALLOCX, 0)                                                 \
    X(S, STD_rallocx, T_STD, "rallocx", SH_RALLOCX, 0)                                                 \
    X(S, STD_xallocx, T_STD, "xallocx", SH_XALLOCX, 0)                                                 \
    X(S, STD_sallocx, T_STD, "sallocx", SH_USABLE, 0)                                                  \
    X(S, STD_dallocx, T_STD, "dallocx", SH_FREE, 0)                                                    \
    X(S, STD_sdallocx, T_STD, "sdallocx", SH_FREE, 0)                                                  \
    X(S, STD_free_sized, T_STD, "free_sized", SH_FREE, 0)                                              \
    X(S, STD_free_aligned_sized, T_STD, "free_aligned_sized", SH_FREE, 0)                              \
    X(S, STD_Znwm, T_STD, "_Znwm", SH_MALLOC, 0)                                                       \
    X(S, STD_Znam, T_STD, "_Znam", SH_MALLOC, 0)                                                       \
    X(S, STD_Znwm_nt, T_STD, "_ZnwmRKSt9nothrow_t", SH_MALLOC, 0)                                      \
    X(S, STD_Znam_nt, T_STD, "_ZnamRKSt9nothrow_t", SH_MALLOC, 0)                                      \
    X(S, STD_Znwm_al, T_STD, "_ZnwmSt11align_val_t", SH_ALIGNED, 0)                                    \
    X(S, STD_Znam_al, T_STD, "_ZnamSt11align_val_t", SH_ALIGNED, 0)                                    \
    X(S, STD_Znwm_al_nt, T_STD, "_ZnwmSt11align_val_tRKSt9nothrow_t", SH_ALIGNED, 0)                   \
    X(S, STD_Znam_al_nt, T_STD, "_ZnamSt11align_val_tRKSt9nothrow_t", SH_ALIGNED, 0)                   \
    X(S, STD_ZdlPv, T_STD, "_ZdlPv", SH_FREE, 0)                                                       \
    X(S, STD_ZdaPv, T_STD, "_ZdaPv", SH_FREE, 0)                                                       \
    X(S, STD_ZdlPvm, T_STD, "_ZdlPvm", SH_FREE, 0)                                                     \
    X(S, STD_ZdaPvm, T_STD, "_ZdaPvm", SH_FREE, 0)                                                     \
    X(S, STD_ZdlPv_nt, T_STD, "_ZdlPvRKSt9nothrow_t", SH_FREE, 0)                                      \
    X(S, STD_ZdaPv_nt, T_STD, "_ZdaPvRKSt9nothrow_t", SH_FREE, 0)                                      \
    X(S, STD_ZdlPv_al, T_STD, "_ZdlPvSt11align_val_t", SH_FREE, 0)                                     \
    X(S, STD_ZdaPv_al, T_STD, "_ZdaPvSt11align_val_t", SH_FREE, 0)                                     \
    X(S, STD_ZdlPvm_al, T_STD, "_ZdlPvmSt11align_val_t", SH_FREE, 0)                                   \
    X(S, STD_ZdaPvm_al, T_STD, "_ZdaPvmSt11align_val_t", SH_FREE, 0)                                   \
    X(S, STD_ZdlPv_al_nt, T_STD, "_ZdlPvSt11align_val_tRKSt9nothrow_t", SH_FREE, 0)                    \
    X(S, STD_ZdaPv_al_nt, T_STD, "_ZdaPvSt11align_val_tRKSt9nothrow_t", SH_FREE, 0)                    \
    X(S, MI_malloc, T_MI, "malloc", SH_MALLOC, 0)                                                      \
    X(S, MI_calloc, T_MI, "calloc", SH_CALLOC, 1)                                                      \
    X(S, MI_zalloc, T_MI, "zalloc", SH_MALLOC, 1)                                                      \
    X(S, MI_mallocn, T_MI, "mallocn", SH_CALLOC, 0)                                                    \
    X(S, MI_malloc_small, T_MI, "malloc_small", SH_MALLOC, 0)                                          \
    X(S, MI_zalloc_small, T_MI, "zalloc_small", SH_MALLOC, 1)                                          \
    X(S, MI_realloc, T_MI, "realloc", SH_REALLOC, 0)                                                   \
    X(S, MI_reallocf, T_MI, "reallocf", SH_REALLOC, 0)                                                 \
    X(S, MI_rezalloc, T_MI, "rezalloc", SH_REALLOC, 1)                                                 \
    X(S, MI_reallocn, T_MI, "reallocn", SH_REALLOCN, 0)                                                \
    X(S, MI_recalloc, T_MI, "recalloc", SH_REALLOCN, 1)                                                \
    X(S, MI_malloc_aligned, T_MI, "malloc_aligned", SH_ALIGNED, 0)                                     \
    X(S, MI_zalloc_aligned, T_MI, "zalloc_aligned", SH_ALIGNED, 1)                                     \
    X(S, MI_calloc_aligned, T_MI, "calloc_aligned", SH_CALLOC_AL, 1)                                   \
    X(S, MI_realloc_aligned, T_MI, "realloc_aligned", SH_REALLOC_AL, 0)                                \
    X(S, MI_rezalloc_aligned, T_MI, "rezalloc_aligned", SH_REALLOC_AL, 1)                              \
    X(S, MI_free, T_MI, "free", SH_FREE, 0)                                                            \
    X(S, MI_free_size, T_MI, "free_size", SH_FREE, 0)                                                  \
    X(S, MI_free_aligned, T_MI, "free_aligned", SH_FREE, 0)                                            \
    X(S, MI_free_size_aligned, T_MI, "free_size_aligned", SH_FREE, 0)                                  \
    X(S, MI_cfree, T_MI, "cfree", SH_FREE, 0)                                                          \
    X(S, MI_usable_size, T_MI, "usable_size", SH_USABLE, 0)                                            \
    X(S, MI_malloc_size, T_MI, "malloc_size", SH_USABLE, 0)                                            \
    X(S, MI_malloc_usable_size, T_MI, "malloc_usable_size", SH_USABLE, 0)                              \
    X(S, MI_expand, T_MI, "expand", SH_EXPAND, 0)                                                      \
    X(S, MI__expand, T_MI, "_expand", SH_EXPAND, 0)                                                    \
    X(S, MI_posix_memalign, T_MI, "posix_memalign", SH_POSIX, 0)                                       \
    X(S, MI_memalign, T_MI, "memalign", SH_MEMALIGN, 0)                                                \
    X(S, MI_aligned_alloc, T_MI, "aligned_alloc", SH_MEMALIGN, 0)                                      \
    X(S, MI_valloc, T_MI, "valloc", SH_MALLOC, 2)                                                      \
    X(S, MI_pvalloc, T_MI, "pvalloc", SH_MALLOC, 2)                                                    \
    X(S, MI_new, T_MI, "new", SH_MALLOC, 0)                                                            \
    X(S, MI_new_nothrow, T_MI, "new_nothrow", SH_MALLOC, 0)                                            \
    X(S, MI_new_aligned, T_MI, "new_aligned", SH_ALIGNED, 0)                                           \
    X(S, MI_new_aligned_nothrow, T_MI, "new_aligned_nothrow", SH_ALIGNED, 0)                           \
    X(S, MI_new_n, T_MI, "new_n", SH_CALLOC, 0)                                                        \
    X(S, MI_new_realloc, T_MI, "new_realloc", SH_REALLOC, 0)                                           \
    X(S, MI_new_reallocn, T_MI, "new_reallocn", SH_REALLOCN, 0)                                        \
    X(S, MI_heap_malloc, T_MI, "heap_malloc", SH_HMALLOC, 0)                                           \
    X(S, MI_heap_zalloc, T_MI, "heap_zalloc", SH_HMALLOC, 1)                                           \
    X(S, MI_heap_malloc_small, T_MI, "heap_malloc_small", SH_HMALLOC, 0)                               \
    X(S, MI_heap_zalloc_small, T_MI, "heap_zalloc_small", SH_HMALLOC, 1)                               \
    X(S, MI_heap_alloc_new, T_MI, "heap_alloc_new", SH_HMALLOC, 0)                                     \
    X(S, MI_heap_calloc, T_MI, "heap_calloc", SH_HCALLOC, 1)                                           \
    X(S, MI_heap_mallocn, T_MI, "heap_mallocn", SH_HCALLOC, 0)                                         \
    X(S, MI_heap_alloc_new_n, T_MI, "heap_alloc_new_n", SH_HCALLOC, 0)                                 \
    X(S, MI_heap_malloc_aligned, T_MI, "heap_malloc_aligned", SH_HALIGNED, 0)                          \
    X(S, MI_heap_zalloc_aligned, T_MI, "heap_zalloc_aligned", SH_HALIGNED, 1)                          \
    X(S, MI_heap_realloc, T_MI, "heap_realloc", SH_HREALLOC, 0)                                        \
    X(S, MI_heap_reallocf, T_MI, "heap_reallocf", SH_HREALLOC, 0)                                      \
    X(S, MI_heap_rezalloc, T_MI, "heap_rezalloc", SH_HREALLOC, 1)                                      \
    X(S, MI_heap_reallocn, T_MI, "heap_reallocn", SH_HREALLOCN, 0)                                     \
    X(S, MI_heap_recalloc, T_MI, "heap_recalloc", SH_HREALLOCN, 1)                                     \
    X(S, MI_heap_realloc_aligned, T_MI, "heap_realloc_aligned", SH_HREALLOC_AL, 0)                     \
    X(S, MI_heap_rezalloc_aligned, T_MI, "heap_rezalloc_aligned", SH_HREALLOC_AL, 1)                   \
    X(S, MI_heap_calloc_aligned, T_MI, "heap_calloc_aligned", SH_HCALLOC_AL, 1)                        \
    X(S, MI_strdup, T_MI, "strdup", SH_STRDUP, 0)                                                      \
    X(S, MI_strndup, T_MI, "strndup", SH_STRDUP, 0)                                                    \
    X(S, MI_realpath, T_MI, "realpath", SH_STRDUP, 1)                                                  \
    X(S, MI_heap_strdup, T_MI, "heap_strdup", SH_HSTRDUP, 0)                                           \
    X(S, MI_heap_strndup, T_MI, "heap_strndup", SH_HSTRDUP, 0)                                         \
    X(S, MI_heap_realpath, T_MI, "heap_realpath", SH_HSTRDUP, 1)                                       \
    X(S, MI_realloc_aligned_at, T_MI, "realloc_aligned_at", SH_GREALLOC_AT, 0)                         \
    X(S, MI_rezalloc_aligned_at, T_MI, "rezalloc_aligned_at", SH_GREALLOC_AT, 1)                       \
    X(S, MI_recalloc_aligned, T_MI, "recalloc_aligned", SH_GRECALLOC_AL, 1)                            \
    X(S, MI_recalloc_aligned_at, T_MI, "recalloc_aligned_at", SH_GRECALLOC_AT, 1)                      \
    X(S, MI_heap_realloc_aligned_at, T_MI, "heap_realloc_aligned_at", SH_GHREALLOC_AT, 0)              \
    X(S, MI_heap_rezalloc_aligned_at, T_MI, "heap_rezalloc_aligned_at", SH_GHREALLOC_AT, 1)            \
    X(S, MI_heap_recalloc_aligned, T_MI, "heap_recalloc_aligned", SH_GHRECALLOC_AL, 1)                 \
    X(S, MI_heap_recalloc_aligned_at, T_MI, "heap_recalloc_aligned_at", SH_GHRECALLOC_AT, 1)           \
    X(S, MI_heap_destroy, T_MI, "heap_destroy", SH_HDESTROY, 0)                                        \
    X(S, MI_heap_delete, T_MI, "heap_delete", SH_HDELETE, 0)                                           \
    X(S, MI_heap_new_ex, T_MI, "heap_new_ex", SH_HNEW, 0)                                              \
    X(S, MI_heap_new_in_arena, T_MI, "heap_new_in_arena", SH_HNEW_ARENA, 0)                            \
    X(S, MI_heap_get_default, T_MI, "heap_get_default", SH_LOOKUP, 0)                                  \
    X(S, MI_heap_get_backing, T_MI, "heap_get_backing", SH_LOOKUP, 0)                                  \
    X(S, TC_malloc, T_TC, "malloc", SH_MALLOC, 0)                                                      \
    X(S, TC_calloc, T_TC, "calloc", SH_CALLOC, 1)                                                      \
    X(S, TC_realloc, T_TC, "realloc", SH_REALLOC, 0)                                                   \
    X(S, TC_free, T_TC, "free", SH_FREE, 0)                                                            \
    X(S, TC_cfree, T_TC, "cfree", SH_FREE, 0)                                                          \
    X(S, TC_free_sized, T_TC, "free_sized", SH_FREE, 0)                                                \
    X(S, TC_memalign, T_TC, "memalign", SH_MEMALIGN, 0)                                                \
    X(S, TC_posix_memalign, T_TC, "posix_memalign", SH_POSIX, 0)                                       \
    X(S, TC_valloc, T_TC, "valloc", SH_MALLOC, 2)                                                      \
    X(S, TC_pvalloc, T_TC, "pvalloc", SH_MALLOC, 2)                                                    \
    X(S, TC_malloc_size, T_TC, "malloc_size", SH_USABLE, 0)                                            \
    X(S, TC_malloc_skip_new_handler, T_TC, "malloc_skip_new_handler", SH_MALLOC, 0)                    \
    X(S, TC_new, T_TC, "new", SH_MALLOC, 0)                                                            \
    X(S, TC_newarray, T_TC, "newarray", SH_MALLOC, 0)                                                  \
    X(S, TC_new_nothrow, T_TC, "new_nothrow", SH_MALLOC, 0)                                            \
    X(S, TC_newarray_nothrow, T_TC, "newarray_nothrow", SH_MALLOC, 0)                                  \
    X(S, TC_new_aligned, T_TC, "new_aligned", SH_ALIGNED, 0)                                           \
    X(S, TC_newarray_aligned, T_TC, "newarray_aligned", SH_ALIGNED, 0)                                 \
    X(S, TC_new_aligned_nothrow, T_TC, "new_aligned_nothrow", SH_ALIGNED, 0)                           \
    X(S, TC_newarray_aligned_nothrow, T_TC, "newarray_aligned_nothrow", SH_ALIGNED, 0)                 \
    X(S, TC_delete, T_TC, "delete", SH_FREE, 0)                                                        \
    X(S, TC_deletearray, T_TC, "deletearray", SH_FREE, 0)                                              \
    X(S, TC_delete_nothrow, T_TC, "delete_nothrow", SH_FREE, 0)                                        \
    X(S, TC_deletearray_nothrow, T_TC, "deletearray_nothrow", SH_FREE, 0)                              \
    X(S, TC_delete_sized, T_TC, "delete_sized", SH_FREE, 0)                                            \
    X(S, TC_deletearray_sized, T_TC, "deletearray_sized", SH_FREE, 0)                                  \
    X(S, TC_delete_aligned, T_TC, "delete_aligned", SH_FREE, 0)                                        \
    X(S, TC_deletearray_aligned, T_TC, "deletearray_aligned", SH_FREE, 0)                              \
    X(S, TC_delete_sized_aligned, T_TC, "delete_sized_aligned", SH_FREE, 0)                            \
    X(S, TC_deletearray_sized_aligned, T_TC, "deletearray_sized_aligned", SH_FREE, 0)                  \
    X(S, TC_delete_aligned_nothrow, T_TC, "delete_aligned_nothrow", SH_FREE, 0)                        \
    X(S, TC_deletearray_aligned_nothrow, T_TC, "deletearray_aligned_nothrow", SH_FREE, 0)

#define HK_ID(S, id, tab, name, shape, p1) HK_##id,
enum hk_id { HK_ROWS(HK_ID, 0) HK_NROWS };
#undef HK_ID

struct hk_row {
    const char *name;
    uint8_t table, shape, p1;
};
extern const struct hk_row hk_rows[HK_NROWS];

/* Does a row's hook count allocations (the countdown), or only guard pointers (free, usable size,
 * resize in place: a block of ours must never reach the allocator)? */
static inline int hk_counts(const struct hk_row *r) { return r->shape <= SH_HREALLOC_AL; }
/* Does a row's hook only remember what the original made (mimalloc's heap makers), no pointer of
 * ours reaching it? One that cannot be hooked is left alone, the allocator still hooked. */
static inline int hk_remembers(const struct hk_row *r) { return r->shape == SH_HNEW || r->shape == SH_HNEW_ARENA; }
/* Does a row's shape take mimalloc's heap first? */
static inline int hk_heap_first(int shape) { return shape >= SH_HMALLOC && shape <= SH_HREALLOC_AL; }

/* Allocators linked into one process that memlens can hook at once. */
#define HK_SLOTS 3

/* One hooked allocator: the originals of its entry points (trampolines, or the function itself for
 * an entry not hooked) by row, and its family (family.h) for the seam's slow paths. */
struct hk_slot {
    struct ml_family fam;
    void *orig[HK_NROWS];
};
extern struct hk_slot hk_slots[HK_SLOTS];

/* Slot s's family malloc and free (what the seam's slow paths call), built on whichever of its
 * entry points the program has; set once its orig[] is filled. */
void hk_slot_basics(int s);

/* The hook function of row `id` in slot `s`. */
void *hk_hook(int s, int id);
/* What stands in front of row `id` while hooks do not count: a guard for the reallocating rows
 * (a block of ours must still not reach the allocator), NULL for the others (the original). */
void *hk_guard(int s, int id);

#pragma GCC visibility pop
#endif
