/* Messages on stderr (log.h), and the internal failure that stops profiling. The bottom floor:
 * nothing here calls into the runtime beyond the malloc-free writer (out.c). */
#include <stdatomic.h>

#include "log.h"
#include "out.h"

void ml_log(const char *msg)
{
    struct ml_out o = {.fd = 2};
    ml_out_str(&o, "memlens: ");
    ml_out_str(&o, msg);
    ml_out_str(&o, "\n");
    ml_out_flush(&o);
}

void ml_fail(const char *why)
{
    atomic_store(&ml_cfg.active, 0);
    if (!atomic_exchange(&ml_cfg.failed, 1)) {
        ml_log(why);
        ml_log("profiling stopped; the program continues");
    }
}
