/* Whose anonymous mapping is this (mmapwho.c)? An allocator's own mappings are its arenas, whose
 * blocks memlens already counts through malloc or the allocator's entry hooks: mmap.c drops them. */
#ifndef MEMLENS_MMAPWHO_H
#define MEMLENS_MMAPWHO_H
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* 1 if the stack of the mmap call being sampled (ra: the return address into mmap's caller) runs
 * through an allocator memlens counts: the runtime itself (its interposers and hooks call the real
 * allocator), the module of the next malloc when that is not the C library (a jemalloc, tcmalloc or
 * mimalloc preloaded or linked as a library), or a function of an allocator linked into a module
 * (jemalloc's `je_`/`_rjem_`, mimalloc's `mi_`/`_mi_`, gperftools' `tc_`/`tcmalloc::`). Slow: call
 * it only for a mapping whose sample fired. */
int ml_mmap_by_allocator(uintptr_t ra);
/* A table of `bytes` for the mmap interceptor's own use, mapped by the system call (never through
 * ourselves), pages committed as touched; NULL if it cannot be. */
void *ml_mmap_table(size_t bytes);

#pragma GCC visibility pop
#endif
