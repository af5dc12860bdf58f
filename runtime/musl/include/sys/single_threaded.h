/* musl has no sys/single_threaded.h: compat.h defines __libc_single_threaded as 0 (unknown). */
