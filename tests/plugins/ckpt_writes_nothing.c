/* A checkpoint writer that reports success and writes nothing: the runtime must notice before it
 * publishes the checkpoint, and keep the previous one and `latest`. */
#include <loom/plugin.h>

static loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* e) {
  (void)h; (void)o; (void)e;
  *self = 0;
  return LOOM_OK;
}
static void destroy(void* self) { (void)self; }
static loom_status save(void* self, const char* dir, const char* name, const void* data, size_t bytes, loom_error* e) {
  (void)self; (void)dir; (void)name; (void)data; (void)bytes; (void)e;
  return LOOM_OK;
}
static loom_status finish(void* self, loom_error* e) {
  (void)self; (void)e;
  return LOOM_OK;
}

static const loom_ckpt_v1 table = {.base = {.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof(loom_ckpt_v1)},
                                            .kind = LOOM_KIND_CKPT,
                                            .name = "nowrite",
                                            .version = "0.0.1",
                                            .summary = "says it saved; saves nothing",
                                            .create = create,
                                            .destroy = destroy},
                                   .save = save,
                                   .finish = finish};
static const loom_plugin* const list[] = {&table.base};

LOOM_EXPORT loom_status loom_plugin_entry_v1(const loom_host* host, const loom_plugin* const** out, size_t* count,
                                             loom_error* err) {
  (void)host; (void)err;
  *out = list;
  *count = 1;
  return LOOM_OK;
}
