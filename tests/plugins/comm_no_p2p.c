/* A comm plugin with collectives but no point-to-point transfers (send and recv are NULL): the
 * runtime must refuse it for layouts that need send/recv (context parallelism's ring) before any
 * rank starts. It is never initialised. */
#include <loom/plugin.h>

static loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* e) {
  (void)h; (void)o; (void)e;
  *self = 0;
  return LOOM_OK;
}
static void destroy(void* self) { (void)self; }

static const loom_comm_v1 table = {.base = {.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof(loom_comm_v1)},
                                            .kind = LOOM_KIND_COMM,
                                            .name = "nop2p",
                                            .version = "0.0.1",
                                            .summary = "collectives only, no send/recv",
                                            .create = create,
                                            .destroy = destroy}};
static const loom_plugin* const list[] = {&table.base};

LOOM_EXPORT loom_status loom_plugin_entry_v1(const loom_host* host, const loom_plugin* const** out,
                                             size_t* count, loom_error* err) {
  (void)host; (void)err;
  *out = list;
  *count = 1;
  return LOOM_OK;
}
