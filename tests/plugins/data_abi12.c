/* A data plugin built against ABI 1.2: it cannot know that expert gradients reduce over another
 * group, so the runtime must refuse it under expert parallelism rather than average them wrongly. */
#include <loom/plugin.h>

static loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* e) {
  (void)h; (void)o; (void)e;
  *self = 0;
  return LOOM_OK;
}
static void destroy(void* self) { (void)self; }
static int32_t score(const loom_host* h, const char** why) {
  (void)h; (void)why;
  return 1;
}

/* Never run: the runtime refuses the plugin first. Present because a data table must have them. */
static loom_status setup(void* self, const loom_data_context* ctx, loom_error* e) {
  (void)self; (void)ctx; (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status grad_ready(void* self, int64_t param, loom_error* e) {
  (void)self; (void)param; (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status finish_grads(void* self, double* comm_ms, double* exposed_ms, loom_error* e) {
  (void)self; (void)comm_ms; (void)exposed_ms; (void)e;
  return LOOM_UNAVAILABLE;
}

static const loom_data_v1 table = {.base = {.v = {LOOM_ABI_MAJOR, 2, sizeof(loom_data_v1)},
                                            .kind = LOOM_KIND_PARALLEL,
                                            .slot = LOOM_SLOT_DATA,
                                            .name = "ddp12",
                                            .version = "0.0.1",
                                            .summary = "a data plugin from ABI 1.2",
                                            .score = score,
                                            .create = create,
                                            .destroy = destroy},
                                   .setup = setup,
                                   .grad_ready = grad_ready,
                                   .finish_grads = finish_grads};
static const loom_plugin* const list[] = {&table.base};

LOOM_EXPORT loom_status loom_plugin_entry_v1(const loom_host* host, const loom_plugin* const** out,
                                             size_t* count, loom_error* err) {
  (void)host; (void)err;
  *out = list;
  *count = 1;
  return LOOM_OK;
}
