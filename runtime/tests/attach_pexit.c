/* main() calls pthread_exit while a worker allocates for 1.5 s (tests/e2e/attach.rs): after an attach,
 * the process must still end when the worker does (the runtime's threads must not keep it alive). */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
static void *w(void *a) { for (int i = 0; i < 150; i++) { free(malloc(1000)); usleep(10000); } return a; }
int main(void) { pthread_t t; pthread_create(&t, 0, w, 0); pthread_exit(0); }
