/* The musl build has no systemtap sys/sdt.h on its include path: its USDT probes are empty (the
 * glibc build keeps them; runtime/README.md, "musl"). */
#define STAP_PROBE1(provider, name, a) ((void)(a))
#define STAP_PROBE3(provider, name, a, b, c) ((void)(a), (void)(b), (void)(c))
