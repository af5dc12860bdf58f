/* What memlens could and could not see, said once on stderr and kept for every dump (`note` lines,
 * which `memlens report` turns into the profile's comments): the allocators hooked in the program,
 * those it cannot hook (intercept/finder.c), and a heap that grows where nothing is sampled
 * (control/blind.c). In base/ because the dump writer (control/dump.c) reads them and must link
 * without the interposers (the C unit tests link it against the floors below intercept/). */
#include <string.h>

#include "notes.h"
#include "log.h"
#include "rt.h"

#define NOTES 16
#define NOTE_LEN 512

static char notes[NOTES][NOTE_LEN];
static _Atomic int nnotes;
static _Atomic int notes_lock;

void ml_note(int say, const char *text)
{
    if (say)
        ml_log("%s", text + (strncmp(text, "memlens: ", 9) ? 0 : 9));
    ml_spin_lock(&notes_lock);
    int n = atomic_load(&nnotes);
    if (n < NOTES) {
        size_t k = strlen(text) < NOTE_LEN - 1 ? strlen(text) : NOTE_LEN - 1;
        memcpy(notes[n], text, k);
        notes[n][k] = 0;
        atomic_store_explicit(&nnotes, n + 1, memory_order_release);
    }
    ml_spin_unlock(&notes_lock);
}

int ml_notes_count(void) { return atomic_load_explicit(&nnotes, memory_order_acquire); }

void ml_notes_join(int from, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = from; i < ml_notes_count() && len + 2 < cap; i++) {
        const char *t = notes[i] + (strncmp(notes[i], "memlens: ", 9) ? 0 : 9);
        if (len)
            buf[len++] = '\n';
        size_t k = strlen(t) < cap - len - 1 ? strlen(t) : cap - len - 1;
        memcpy(buf + len, t, k);
        len += k;
        buf[len] = 0;
    }
}

void ml_notes_write(struct ml_out *o)
{
    int n = ml_notes_count();
    for (int i = 0; i < n; i++) {
        ml_out_str(o, "note ");
        ml_out_path(o, notes[i] + (strncmp(notes[i], "memlens: ", 9) ? 0 : 9));
        ml_out_str(o, "\n");
    }
}
