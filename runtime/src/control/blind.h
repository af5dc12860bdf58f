/* A heap growing where memlens samples nothing (blind.c). */
#ifndef MEMLENS_BLIND_H
#define MEMLENS_BLIND_H

#pragma GCC visibility push(hidden)

/* Once a second, from the control thread: say once when resident memory grows by hundreds of MB
 * that memlens's samples do not account for. */
void ml_blind_check(void);

#pragma GCC visibility pop
#endif
