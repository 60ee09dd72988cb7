/* An ordinary shared library that happens to sit in the plugin path. */
#include <loom/plugin.h>

LOOM_EXPORT int some_function(int x) { return x + 1; }
