/* A library from a later major: it exports only loom_plugin_entry_v4. */
#include <loom/plugin.h>

LOOM_EXPORT int loom_plugin_entry_v4(void) { return 0; }
