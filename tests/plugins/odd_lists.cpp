// Libraries whose entry hands over a list a careful runtime must not take at its word, one way
// each, selected by the macro the build defines:
//   LOOM_TEST_V1_NULL_ENTRY  an ABI 1 list of three: a good precision ("v1good"), a NULL, and a
//                            data plugin ("v1quiet") whose save_state and load_state are there, as
//                            ABI 1's SDK filled them for every plugin, and save nothing
//   LOOM_TEST_V1_MINOR_9     an ABI 1 plugin claiming ABI 1.9, which never existed
//   LOOM_TEST_EMPTY_LIST     an ABI 3 entry that returns OK and no plugins
//   LOOM_TEST_ONE_BAD        an ABI 3 list of two: a good plugin ("boom") and one whose table is
//                            incomplete (an fp32 impostor with no way to round an operand)
// The ABI 1 ones use the layouts the runtime keeps for its adapters.
#include "loader/abi_v1.hpp"

namespace v1 = loom::plugins::v1;

namespace {

template <class Host>
loom_status create(const Host*, const loom_options*, void** self, loom_error*) {
  *self = nullptr;
  return LOOM_OK;
}
void destroy(void*) {}

#if defined(LOOM_TEST_V1_NULL_ENTRY) || defined(LOOM_TEST_V1_MINOR_9)
const v1::precision v1_table = [] {
  v1::precision t{};
#if defined(LOOM_TEST_V1_MINOR_9)
  t.base.v = {1, 9, sizeof(v1::precision)};
  t.base.name = "v1nine";
#else
  t.base.v = {1, 8, sizeof(v1::precision)};
  t.base.name = "v1good";
#endif
  t.base.kind = LOOM_KIND_PRECISION;
  t.base.version = "0.0.1";
  t.base.summary = "an exact ABI 1 precision";
  t.base.create = create<v1::host>;
  t.base.destroy = destroy;
  t.compute_dtype = LOOM_F32;
  t.exact = 1;
  return t;
}();
// What ABI 1's SDK gave a plugin that kept no state: entries that save and load nothing.
loom_status save_nothing(void*, void*, size_t, size_t* bytes, loom_error*) {
  *bytes = 0;
  return LOOM_OK;
}
loom_status load_nothing(void*, const void*, size_t, loom_error*) { return LOOM_OK; }
// Never run: `loom plugins info` only creates it and asks the size of its state.
loom_status setup(void*, const v1::data_context*, loom_error*) { return LOOM_UNAVAILABLE; }
loom_status grad_ready(void*, int64_t, loom_error*) { return LOOM_UNAVAILABLE; }
loom_status finish_grads(void*, double*, double*, loom_error*) { return LOOM_UNAVAILABLE; }
const v1::data v1_quiet = [] {
  v1::data t{};
  t.base.v = {1, 8, sizeof(v1::data)};
  t.base.kind = LOOM_KIND_PARALLEL;
  t.base.slot = LOOM_SLOT_DATA;
  t.base.name = "v1quiet";
  t.base.version = "0.0.1";
  t.base.summary = "an ABI 1.8 data plugin with the SDK's empty state entries";
  t.base.create = create<v1::host>;
  t.base.destroy = destroy;
  t.setup = setup;
  t.grad_ready = grad_ready;
  t.finish_grads = finish_grads;
  t.save_state = save_nothing;
  t.load_state = load_nothing;
  return t;
}();
const v1::plugin* const v1_list[] = {&v1_table.base, nullptr, &v1_quiet.base};
#else
loom_precision_v2 v2_table(const char* name, int32_t exact) {
  loom_precision_v2 t{};
  t.base.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof(loom_precision_v2)};
  t.base.kind = LOOM_KIND_PRECISION;
  t.base.name = name;
  t.base.version = "0.0.1";
  t.base.summary = exact ? "an exact precision" : "not exact, and no way to round an operand";
  t.base.create = create<loom_host>;
  t.base.destroy = destroy;
  t.compute_dtype = LOOM_F32;
  t.exact = exact;
  return t;
}
const loom_precision_v2 good = v2_table("boom", 1), bad = v2_table("boomsbad", 0);
const loom_plugin* const v2_list[] = {&good.base, &bad.base};
#endif

}  // namespace

#if defined(LOOM_TEST_V1_NULL_ENTRY) || defined(LOOM_TEST_V1_MINOR_9)
extern "C" LOOM_EXPORT loom_status loom_plugin_entry_v1(const v1::host*,
                                                        const v1::plugin* const** out,
                                                        size_t* count, loom_error*) {
  *out = v1_list;
#if defined(LOOM_TEST_V1_NULL_ENTRY)
  *count = 3;
#else
  *count = 1;
#endif
  return LOOM_OK;
}
#else
extern "C" LOOM_EXPORT loom_status loom_plugin_entry_v3(const loom_host*,
                                                        const loom_plugin* const** out,
                                                        size_t* count, loom_error*) {
  *out = v2_list;
#if defined(LOOM_TEST_EMPTY_LIST)
  *count = 0;
#else
  *count = 2;
#endif
  return LOOM_OK;
}
#endif
