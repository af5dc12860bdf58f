/* Notes (notes.c): what memlens could and could not see, said once and kept for every dump. */
#ifndef MEMLENS_NOTES_H
#define MEMLENS_NOTES_H
#include <stddef.h>

#include "out.h"

#pragma GCC visibility push(hidden)

/* Remember a note for the dump (a line without newline); also printed on stderr when `say`. */
void ml_note(int say, const char *text);
/* The notes so far, and those from `from` on one a line into buf. */
int ml_notes_count(void);
void ml_notes_join(int from, char *buf, size_t cap);
/* The dump's `note` lines. */
void ml_notes_write(struct ml_out *o);

#pragma GCC visibility pop
#endif
