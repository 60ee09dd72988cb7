// The precision plugins through their ABI 1.1 tables: the fp16 loss scaler's policy, fp8's
// delayed scaling (amax history, margin, the E4M3/E5M2 split, saturation counts), state that
// survives a save and load, and the runtime's Precision casting operands through the op table.
#include "precision/precision.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <loom/formats.hpp>
#include <loom/sdk.hpp>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/errors.hpp"
#include "loader/registry.hpp"
#include "loader/selection.hpp"
#include "ops/ops.hpp"

using namespace loom;
using namespace loom::plugins;

namespace {

// One precision plugin created from a [plugins.<name>] table, driven through its C table.
struct Plugin {
  Registry reg{{{Registry::install_dir(), "install"}}};
  config::Config cfg;
  Selection sel;
  loom_options opts;
  std::unique_ptr<Instance> inst;
  const loom_precision_v2* t;

  Plugin(const std::string& name, const std::string& options)
      : cfg(config::Config::parse(
            "[plugins]\nprecision = \"" + name + "\"\n[plugins." + name + "]\n" + options,
            "t.toml")),
        sel(resolve(cfg, reg)),
        opts(options_for(cfg, name)),
        inst(std::make_unique<Instance>(sel.slot("precision")->found, &opts)),
        t(inst->table<loom_precision_v2>()) {
    const bool has_policy = t->site_format != nullptr;
    REQUIRE(has_policy);
  }
  int32_t site(const char* name, loom_operand_role role) {
    int32_t id = -1;
    loom_error e;
    REQUIRE(t->add_site(inst->self(), name, role, &id, &e) == LOOM_OK);
    return id;
  }
  loom_operand_format format(int32_t id) { return t->site_format(inst->self(), id); }
  // Ends a step; `other_rank` stands in for what another rank's stats add under MAX.
  bool end(bool found_inf, float other_amax = 0.f) {
    float* stats = nullptr;
    int64_t n = 0;
    loom_error e;
    REQUIRE(t->step_stats(inst->self(), &stats, &n, &e) == LOOM_OK);
    for (int64_t i = 0; i < n / 2; ++i) stats[i] = std::max(stats[i], other_amax);
    int32_t skip = -1;
    REQUIRE(t->end_step(inst->self(), found_inf, &skip, &e) == LOOM_OK);
    return skip != 0;
  }
  double metric(const std::string& name) {
    const char* names[16];
    double values[16];
    int32_t n = t->metrics(inst->self(), names, values, 16);
    for (int32_t i = 0; i < n; ++i)
      if (name == names[i]) return values[i];
    FAIL("no metric " << name);
    return 0;
  }
  std::string save() {
    size_t bytes = 0;
    loom_error e;
    REQUIRE(t->save_state(inst->self(), nullptr, 0, &bytes, &e) == LOOM_OK);
    std::string s(bytes, '\0');
    REQUIRE(t->save_state(inst->self(), s.data(), s.size(), &bytes, &e) == LOOM_OK);
    return s;
  }
  loom_status load(const std::string& s, std::string* message = nullptr) {
    loom_error e;
    loom_status st = t->load_state(inst->self(), s.data(), s.size(), &e);
    if (message) *message = e.message;
    return st;
  }
};

}  // namespace

TEST_CASE(
    "fp16: skipped overflow steps back off after the hysteresis, clean steps grow the scale") {
  Plugin p("fp16",
           "initial_scale = 1024.0\ngrowth_interval = 3\nhysteresis = 2\nmin_scale = 256.0\n");
  CHECK(p.format(p.site("w", LOOM_OPERAND_WEIGHT)).dtype == LOOM_F16);
  CHECK(p.t->loss_scale(p.inst->self()) == 1024.0);
  CHECK_FALSE(p.end(false));
  CHECK_FALSE(p.end(false));
  CHECK(p.t->loss_scale(p.inst->self()) == 1024.0);
  CHECK_FALSE(p.end(false));  // third clean step in a row: grow
  CHECK(p.t->loss_scale(p.inst->self()) == 2048.0);
  CHECK(p.end(true));  // overflow: skipped, but the first one is tolerated (hysteresis 2)
  CHECK(p.t->loss_scale(p.inst->self()) == 2048.0);
  CHECK(p.metric("overflow") == 1.0);
  CHECK(p.end(true));
  CHECK(p.t->loss_scale(p.inst->self()) == 1024.0);
  CHECK(p.end(true));  // the budget stays spent until the scale grows (Megatron's rule)
  CHECK(p.t->loss_scale(p.inst->self()) == 512.0);
  for (int i = 0; i < 5; ++i) CHECK(p.end(true));
  CHECK(p.t->loss_scale(p.inst->self()) == 256.0);  // never below min_scale
  CHECK(p.metric("overflow_steps") == 8.0);
  CHECK_FALSE(p.end(false));
  CHECK(p.metric("overflow") == 0.0);

  const std::string state = p.save();
  Plugin q("fp16", "initial_scale = 65536.0\n");
  CHECK(q.load(state) == LOOM_OK);
  CHECK(q.t->loss_scale(q.inst->self()) == 256.0);
  CHECK(q.metric("overflow_steps") == 8.0);
  std::string why;
  CHECK(q.load("xyz", &why) == LOOM_BAD_CONFIG);
  CHECK(why.find("fp16 scaler state is 3 bytes") != std::string::npos);
}

TEST_CASE("fp8: delayed scaling from the reduced amax history, E4M3 forward and E5M2 backward") {
  Plugin p("fp8", "amax_history_len = 2\nmargin = 1\n");
  const int32_t w = p.site("blocks.0.fc.weight", LOOM_OPERAND_WEIGHT);
  const int32_t dy = p.site("blocks.0.fc.weight.dy", LOOM_OPERAND_GRADIENT);
  CHECK(p.format(w).dtype == LOOM_FP8_E4M3);
  CHECK(p.format(dy).dtype == LOOM_FP8_E5M2);
  CHECK(p.format(w).scale == 1.f);  // no history yet
  p.t->observe(p.inst->self(), w, 2.f, 0);
  p.t->observe(p.inst->self(), dy, 0.5f, 0);
  p.end(false, 4.f);  // another rank saw amax 4 on both: MAX wins everywhere
  CHECK(p.format(w).scale == 448.f / 4.f / 2.f);
  CHECK(p.format(dy).scale == 57344.f / 4.f / 2.f);
  p.t->observe(p.inst->self(), w, 1.f, 0);
  p.end(false);
  CHECK(p.format(w).scale == 448.f / 4.f / 2.f);  // history {4, 1}: max is still 4
  p.t->observe(p.inst->self(), w, 1.f, 1);        // this cast clipped
  p.end(false);
  CHECK(p.format(w).scale == 448.f / 1.f / 2.f);  // the 4 fell out of the 2-step history
  CHECK(p.metric("fp8_saturated_tensors") == 1.0);
  CHECK(p.metric("fp8_tensors") == 2.0);
  p.t->observe(p.inst->self(), w, NAN, 0);  // a poisoned step leaves the scale alone
  p.end(false);
  CHECK(p.format(w).scale == 448.f / 1.f / 2.f);
  CHECK(p.metric("fp8_saturated_tensors") == 0.0);

  const std::string state = p.save();
  Plugin q("fp8", "amax_history_len = 2\nmargin = 1\n");
  CHECK(q.load(state) == LOOM_OK);  // before the model names its sites, as on resume
  CHECK(q.site("blocks.0.fc.weight", LOOM_OPERAND_WEIGHT) == 0);
  CHECK(q.site("blocks.0.fc.weight.dy", LOOM_OPERAND_GRADIENT) == 1);
  CHECK(q.format(0).scale == p.format(w).scale);
  CHECK(q.format(1).dtype == LOOM_FP8_E5M2);
  CHECK(q.metric("fp8_tensors") == 2.0);  // named onto the loaded sites, not appended
  CHECK(q.load(state) == LOOM_OK);        // and after: the same sites, kept
  Plugin tiny("fp8", "");
  const int32_t t = tiny.site("w", LOOM_OPERAND_WEIGHT);
  tiny.t->observe(tiny.inst->self(), t, 1e-38f, 0);
  tiny.end(false);
  CHECK(std::isfinite(tiny.format(t).scale));  // 448 / 1e-38 overflows: clamped
  Plugin other("fp8", "amax_history_len = 2\n");
  other.site("blocks.0.qkv.weight", LOOM_OPERAND_WEIGHT);
  std::string why;
  CHECK(other.load(state, &why) == LOOM_BAD_CONFIG);
  CHECK(why.find("names site 'blocks.0.fc.weight' where this model has 'blocks.0.qkv.weight'") !=
        std::string::npos);
  Plugin longer("fp8", "amax_history_len = 3\n");
  CHECK(longer.load(state, &why) == LOOM_BAD_CONFIG);
  CHECK(why.find("amax_history_len 2, this run 3") != std::string::npos);
}

TEST_CASE("fp8 most_recent uses the last amax only, bad options are config errors") {
  Plugin p("fp8", "amax_compute_algo = \"most_recent\"\nformat = \"e4m3\"\n");
  const int32_t dy = p.site("x.dy", LOOM_OPERAND_GRADIENT);
  CHECK(p.format(dy).dtype == LOOM_FP8_E4M3);  // e4m3 everywhere, gradients too
  p.t->observe(p.inst->self(), dy, 8.f, 0);
  p.end(false);
  p.t->observe(p.inst->self(), dy, 2.f, 0);
  p.end(false);
  CHECK(p.format(dy).scale == 448.f / 2.f);
  CHECK_THROWS_WITH_AS(Plugin("fp8", "margin = -1\n"), doctest::Contains("margin must be >= 0"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(Plugin("fp8", "format = \"e3m4\"\n"), doctest::Contains("format must be"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(Plugin("fp16", "backoff_factor = 2.0\n"),
                       doctest::Contains("backoff_factor must be in (0, 1)"), ConfigError);
}

namespace {

// An operand's values, whichever storage the precision slot chose for it.
std::vector<float> values(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == LOOM_F32) return {t.f32(), t.f32() + t.numel()};
  REQUIRE(t.dtype() == LOOM_BF16);
  ops::cpu()->from_bf16(v.data(), static_cast<const uint16_t*>(t.data()), t.numel());
  return v;
}

}  // namespace

TEST_CASE(
    "the runtime casts each operand through the op table and leaves the original alone: a bf16 "
    "copy where the device's GEMM takes bf16, the same values in fp32 where it does not") {
  Registry reg{{{Registry::install_dir(), "install"}}};
  config::Config cfg = config::Config::parse("[plugins]\nprecision = \"bf16\"\n", "t.toml");
  Selection sel = resolve(cfg, reg);
  loom_options opts = options_for(cfg, "bf16");
  // The CPU's table as a device without a typed GEMM has it (CUDA's, for now).
  loom_ops_v2 emulating = *ops::cpu();
  emulating.gemm_typed = nullptr;
  for (const loom_ops_v2* table : {ops::cpu(), static_cast<const loom_ops_v2*>(&emulating)}) {
    Precision prec(sel.slot("precision")->found, &opts, table);
    const bool narrow = table->gemm_typed != nullptr;
    INFO("the device's GEMM takes bf16: " << narrow);
    CHECK(prec.bf16_storage() == narrow);
    // Its own instructions only where the table has them: without, bf16 is widened as it goes.
    CHECK(prec.bf16_gemms() == (narrow && ((table->gemm_operand_dtypes >> LOOM_BF16) & 1u)));
    Tensor x = Tensor::empty({3});
    x.f32()[0] = 1.f + std::ldexp(1.f, -8);  // a bf16 tie: rounds down to 1
    x.f32()[1] = 1.f + std::ldexp(3.f, -8);
    x.f32()[2] = -2.5f;
    Tensor r = prec.operand(x, "w.x", LOOM_OPERAND_ACTIVATION);
    CHECK(r.dtype() == (narrow ? LOOM_BF16 : LOOM_F32));
    CHECK(values(r) == std::vector<float>{1.f, 1.f + std::ldexp(1.f, -6), -2.5f});
    CHECK(x.f32()[0] == 1.f + std::ldexp(1.f, -8));  // the master copy is untouched
    // The GEMM takes either storage: y = r . (1, 1, 1).
    Tensor ones = Tensor::empty({3});
    for (int i = 0; i < 3; ++i) ones.f32()[i] = 1.f;
    float y = 0.f;
    operand_gemm(*table, 0, 0, 1, 1, 3, 1.f, r, 3, ones, 1, 0.f, &y, 1);
    CHECK(y == 1.f + (1.f + std::ldexp(1.f, -6)) - 2.5f);
    CHECK(prec.loss_scale() == 1.0);
    CHECK_FALSE(prec.end_step(
        false, [](float*, int64_t) {}, [](float*, int64_t) {}));
  }
}

namespace {

// Three SDK precision policies: one not overriding observe, one overriding it in a derived class,
// one overriding it privately. Only the first's table leaves observe NULL (the device then skips
// amax).
struct NoObserve : sdk::PrecisionPlugin {
  static constexpr sdk::About about{
      .name = "no-observe", .version = "1", .summary = "s", .compute_dtype = LOOM_BF16};
  explicit NoObserve(const sdk::Context&) {}
  int32_t add_site(const std::string&, loom_operand_role) override { return 0; }
  loom_operand_format site_format(int32_t) override { return {LOOM_BF16, 1.f}; }
};
struct DerivedObserve : NoObserve {
  using NoObserve::NoObserve;
  void observe(int32_t, float, bool) override {}
};
struct PrivateObserve : NoObserve {
  using NoObserve::NoObserve;

 private:
  void observe(int32_t, float, bool) override {}
};

template <class Impl>
bool table_observes() {
  return reinterpret_cast<const loom_precision_v2*>(sdk::precision_plugin<Impl>())->observe;
}

}  // namespace

TEST_CASE("the SDK fills observe only for a policy that overrides it, privately or in a subclass") {
  CHECK(table_observes<PrivateObserve>());
  CHECK_FALSE(table_observes<NoObserve>());
  CHECK(table_observes<DerivedObserve>());
}
