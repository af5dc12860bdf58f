/* The symbol tables of a module's file (elfsym.c): `.symtab` and `.dynsym` of the file itself, its
 * MiniDebugInfo (`.gnu_debugdata`, xz.c) and its separate debug file (by build ID, else by
 * `.gnu_debuglink`). Read from the file mapped read-only: no malloc. */
#ifndef MEMLENS_ELFSYM_H
#define MEMLENS_ELFSYM_H
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* One function symbol: its name, value (a virtual address of the file) and size, and whether it is
 * in `.dynsym` (exported: calls from other modules can be interposed) or only in a `.symtab`. */
typedef void (*ml_sym_fn)(void *arg, const char *name, uint64_t value, uint64_t size, int dynamic);

/* What was found for a module (bits). */
enum {
    ML_SYMS_SYMTAB = 1,    /* the file's own .symtab */
    ML_SYMS_DYNSYM = 2,    /* its .dynsym */
    ML_SYMS_MINIDEBUG = 4, /* .gnu_debugdata, decoded */
    ML_SYMS_DEBUGFILE = 8, /* a separate debug file's .symtab */
    ML_SYMS_UNREADABLE = 16, /* the file could not be opened or is not ELF */
    ML_SYMS_MINIDEBUG_UNREAD = 32, /* it has .gnu_debugdata but liblzma is not there to decode it */
};

/* Call fn on every defined function symbol of the file at `path` and of its debug data. Returns
 * the ML_SYMS_* bits. */
int ml_elf_symbols(const char *path, ml_sym_fn fn, void *arg);

/* Does the file at `path` contain one of the byte strings `needles` (NULL-terminated list)? Returns
 * the index of the first found, or -1. (A stripped program's allocator is named by its strings.) */
int ml_elf_contains(const char *path, const char *const *needles);

/* MiniDebugInfo (xz.c): decode the xz data at [in, in+n) into a fresh read-only mapping; returns it
 * and its length in *len, or NULL (*len = 0 if liblzma is missing, 1 if the data is bad). */
void *ml_xz_decode(const uint8_t *in, size_t n, size_t *len);

#pragma GCC visibility pop
#endif
