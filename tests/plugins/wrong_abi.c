/* A plugin written in plain C11 against plugin.h, claiming an ABI major this runtime does not
 * speak. Also proves plugin.h compiles as C. */
#include <loom/plugin.h>

static loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* e) {
  (void)h;
  (void)o;
  (void)e;
  *self = 0;
  return LOOM_OK;
}
static void destroy(void* self) { (void)self; }

static const loom_precision_v2 table = {
    .base = {.v = {99, 3, sizeof(loom_precision_v2)},
             .kind = LOOM_KIND_PRECISION,
             .name = "future",
             .version = "9.0.0",
             .summary = "built for a future ABI",
             .create = create,
             .destroy = destroy},
};
static const loom_plugin* const list[] = {&table.base};

LOOM_EXPORT loom_status loom_plugin_entry_v3(const loom_host* host, const loom_plugin* const** out,
                                             size_t* count, loom_error* err) {
  (void)host;
  (void)err;
  *out = list;
  *count = 1;
  return LOOM_OK;
}
