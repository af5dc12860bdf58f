/* A library dump_test.c loads and unloads: the dump must still list it, as `unloaded`. */
int memlens_unit_plugin(int x);
int memlens_unit_plugin(int x) { return x * 3 + 1; }
