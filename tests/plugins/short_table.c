/* A comm plugin whose descriptor claims only the size of the common header: the runtime must not
 * read the comm functions past its end. */
#include <loom/plugin.h>

static loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* e) {
  (void)h;
  (void)o;
  (void)e;
  *self = 0;
  return LOOM_OK;
}
static void destroy(void* self) { (void)self; }

static const loom_plugin table = {.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof(loom_plugin)},
                                  .kind = LOOM_KIND_COMM,
                                  .name = "short",
                                  .version = "0.0.1",
                                  .summary = "a truncated comm table",
                                  .create = create,
                                  .destroy = destroy};
static const loom_plugin* const list[] = {&table};

LOOM_EXPORT loom_status loom_plugin_entry_v3(const loom_host* host, const loom_plugin* const** out,
                                             size_t* count, loom_error* err) {
  (void)host;
  (void)err;
  *out = list;
  *count = 1;
  return LOOM_OK;
}
