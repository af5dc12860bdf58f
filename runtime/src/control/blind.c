/* Never a silent blind profile (issue 35): the control thread, once a second, compares the growth of
 * the process's resident memory since profiling began with the heap memlens estimates from its
 * samples. When hundreds of MB arrive that memlens did not see, it says so once (stderr and a note
 * in every dump), with what it suspects. Read off the program's threads: nothing here touches an
 * allocation path. */
#include <stdlib.h>
#include <unistd.h>

#include "../base/fmt.h"
#include "../base/notes.h"
#include "../base/proc.h"
#include "../intercept/finder.h"
#include "../record/peak.h"
#include "blind.h"

#define BLIND_GROWTH ((int64_t)256 << 20) /* resident growth worth a word */

static int64_t resident(void) { return ml_proc_rss_own(); }

void ml_blind_check(void)
{
    static int64_t base = -1;
    static int said;
    if (said || !atomic_load(&ml_cfg.active) || atomic_load(&ml_cfg.failed))
        return;
    int64_t rss = resident();
    if (rss < 0)
        return;
    if (base < 0 || rss < base) {
        base = rss; /* from the first look while sampling (or after memory went back) */
        return;
    }
    int64_t grown = rss - base, seen = ml_heap_now();
    if (grown < BLIND_GROWTH || seen > grown / 10)
        return;
    said = 1;
    char line[512];
    struct ml_buf b = {line, 0, sizeof line};
    ml_buf_str(&b, "memlens: the process's resident memory grew by ");
    ml_buf_u64(&b, (uint64_t)(grown >> 20));
    ml_buf_str(&b, " MiB while profiled, but memlens saw only ");
    ml_buf_u64(&b, (uint64_t)((seen > 0 ? seen : 0) >> 20));
    ml_buf_str(&b, " MiB of live heap: most of it comes from where memlens cannot see");
    ml_buf_str(&b, ml_hooks_count() ? " (besides the allocator it hooked)" : "");
    ml_buf_str(&b, ": an allocator linked into the program without symbols, memory mapped with mmap, or "
                   "arenas of the program's own (memlens_report_alloc can report those)");
    ml_note(1, line);
}
