// fp16: GEMM operands cast to IEEE half, fp32 accumulation and master weights, and a dynamic
// loss scale that keeps small gradients above fp16's underflow (2^-24) without overflowing its
// 65504. The loss gradient is multiplied by the scale; the runtime divides it out of the
// gradients before clipping. A step whose gradients hold inf or NaN on any rank is skipped on
// every rank and the scale backs off; after `growth_interval` clean steps it grows (the PyTorch
// GradScaler policy; `hysteresis` > 1 tolerates that many overflows first, as Megatron does).
#include <algorithm>
#include <cstring>
#include <loom/sdk.hpp>
#include <string>

namespace {

struct Fp16 : loom::sdk::PrecisionPlugin, loom::sdk::Stateful {
  static constexpr loom_option_spec kOptions[] = {
      {"initial_scale", LOOM_OPT_FLOAT, "65536.0", "loss scale at step 1 (2^16)"},
      {"growth_factor", LOOM_OPT_FLOAT, "2.0",
       "scale multiplier after growth_interval clean steps"},
      {"backoff_factor", LOOM_OPT_FLOAT, "0.5", "scale multiplier on an overflow"},
      {"growth_interval", LOOM_OPT_INT, "2000", "clean steps before the scale grows"},
      {"hysteresis", LOOM_OPT_INT, "1", "overflows tolerated before backing off (Megatron uses 2)"},
      {"min_scale", LOOM_OPT_FLOAT, "1.0", "the scale never backs off below this"},
      {"max_scale", LOOM_OPT_FLOAT, "16777216.0", "the scale never grows above this (2^24)"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom::sdk::About about{.name = "fp16",
                                          .version = "1.0.0",
                                          .summary = "fp16 GEMM operands with a dynamic loss scale",
                                          .options = kOptions,
                                          .compute_dtype = LOOM_F16};

  explicit Fp16(const loom::sdk::Context& ctx)
      : scale_(ctx.options.f64("initial_scale")),
        growth_(ctx.options.f64("growth_factor")),
        backoff_(ctx.options.f64("backoff_factor")),
        interval_(ctx.options.i64("growth_interval")),
        hysteresis_(ctx.options.i64("hysteresis")),
        min_(ctx.options.f64("min_scale")),
        max_(ctx.options.f64("max_scale")),
        tolerance_(hysteresis_) {
    using loom::sdk::ConfigError;
    if (!(scale_ > 0))
      throw ConfigError("initial_scale must be > 0, got " + std::to_string(scale_));
    if (!(growth_ >= 1))
      throw ConfigError("growth_factor must be >= 1, got " + std::to_string(growth_));
    if (!(backoff_ > 0 && backoff_ < 1))
      throw ConfigError("backoff_factor must be in (0, 1), got " + std::to_string(backoff_));
    if (interval_ < 1)
      throw ConfigError("growth_interval must be >= 1, got " + std::to_string(interval_));
    if (hysteresis_ < 1)
      throw ConfigError("hysteresis must be >= 1, got " + std::to_string(hysteresis_));
    if (!(min_ > 0 && min_ <= max_))
      throw ConfigError("need 0 < min_scale <= max_scale, got " + std::to_string(min_) + " and " +
                        std::to_string(max_));
  }

  int32_t add_site(const std::string&, loom_operand_role) override { return sites_++; }
  loom_operand_format site_format(int32_t) override { return {LOOM_F16, 1.f}; }
  double loss_scale() override { return scale_; }

  // Skip on overflow; back off once the hysteresis budget is spent; grow after a clean run.
  bool end_step(bool found_inf) override {
    skipped_now_ = found_inf;
    if (found_inf) {
      ++skipped_;
      clean_ = 0;
      // As Megatron's scaler: once the budget is spent every further overflow backs off, until
      // the scale grows again.
      if (--tolerance_ <= 0) scale_ = std::max(min_, scale_ * backoff_);
      return true;
    }
    if (++clean_ >= interval_) {
      scale_ = std::min(max_, scale_ * growth_);
      clean_ = 0;
      tolerance_ = hysteresis_;
    }
    return false;
  }

  void metrics(std::vector<std::pair<const char*, double>>& out) override {
    out.push_back({"loss_scale", scale_});
    out.push_back({"overflow", skipped_now_ ? 1.0 : 0.0});
    out.push_back({"overflow_steps", static_cast<double>(skipped_)});
  }

  // scale, clean-step count, hysteresis budget and skipped count, as raw little-endian fields.
  std::string save_state() override {
    State s{scale_, clean_, tolerance_, skipped_};
    return std::string(reinterpret_cast<const char*>(&s), sizeof s);
  }
  void load_state(const std::string& bytes) override {
    State s;
    if (bytes.size() != sizeof s)
      throw loom::sdk::Error(LOOM_BAD_CONFIG, "fp16 scaler state is " +
                                                  std::to_string(bytes.size()) +
                                                  " bytes, expected " + std::to_string(sizeof s));
    std::memcpy(&s, bytes.data(), sizeof s);
    scale_ = s.scale;
    clean_ = s.clean;
    tolerance_ = s.tolerance;
    skipped_ = s.skipped;
  }

 private:
  struct State {
    double scale;
    int64_t clean, tolerance, skipped;
  };
  double scale_, growth_, backoff_;
  int64_t interval_, hysteresis_;
  double min_, max_;
  int64_t tolerance_, clean_ = 0, skipped_ = 0;
  bool skipped_now_ = false;
  int32_t sites_ = 0;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::precision_plugin<Fp16>())
