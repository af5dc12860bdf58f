/* Placeholder translation unit so the build produces libmemlens.so while the runtime is written. */
int memlens_placeholder_(void);
int memlens_placeholder_(void) { return 0; }
