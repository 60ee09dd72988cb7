// A data plugin built against ABI 1.2, in that ABI's layout: it cannot know that expert gradients
// reduce over another group, so the runtime (through its ABI 1 adapter) must refuse it under expert
// parallelism rather than average them wrongly.
#include "loader/abi_v1.hpp"

namespace v1 = loom::plugins::v1;

namespace {

loom_status create(const v1::host*, const loom_options*, void** self, loom_error*) {
  *self = nullptr;
  return LOOM_OK;
}
void destroy(void*) {}
int32_t score(const v1::host*, const char**) { return 1; }

// Never run: the runtime refuses the plugin first. Present because a data table must have them.
loom_status setup(void*, const v1::data_context*, loom_error*) { return LOOM_UNAVAILABLE; }
loom_status grad_ready(void*, int64_t, loom_error*) { return LOOM_UNAVAILABLE; }
loom_status finish_grads(void*, double*, double*, loom_error*) { return LOOM_UNAVAILABLE; }

// ABI 1.2's data table ended at pieces_loaded; v.size says so.
const v1::data table = [] {
  v1::data t{};
  t.base.v = {1, 2, static_cast<uint32_t>(offsetof(v1::data, capabilities))};
  t.base.kind = LOOM_KIND_PARALLEL;
  t.base.slot = LOOM_SLOT_DATA;
  t.base.name = "ddp12";
  t.base.version = "0.0.1";
  t.base.summary = "a data plugin from ABI 1.2";
  t.base.score = score;
  t.base.create = create;
  t.base.destroy = destroy;
  t.setup = setup;
  t.grad_ready = grad_ready;
  t.finish_grads = finish_grads;
  return t;
}();
const v1::plugin* const list[] = {&table.base};

}  // namespace

extern "C" LOOM_EXPORT loom_status loom_plugin_entry_v1(const v1::host*,
                                                        const v1::plugin* const** out,
                                                        size_t* count, loom_error*) {
  *out = list;
  *count = 1;
  return LOOM_OK;
}
