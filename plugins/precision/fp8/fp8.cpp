// fp8 with delayed scaling (Transformer Engine's recipe). Each GEMM operand ("site") is cast as
// fp8(x * scale) * (1 / scale): HYBRID uses E4M3 (max 448) for weights and activations in forward
// and E5M2 (max 57344) for gradients in backward. A site's scale comes from the amaxes of earlier
// steps, never the current one, so the cast needs no extra pass over the data first:
//   amax  = max over the last amax_history_len steps (or the most recent step's)
//   scale = (fp8_max / amax) / 2^margin
// Before the first amax is known a site uses scale 1, as Transformer Engine does. The amaxes
// are reduced with MAX across the ranks that share the sites (tp and dp) before the history
// moves, so every rank uses the same scale. A site whose cast clipped counts as saturated in
// the step's metrics.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <loom/sdk.hpp>
#include <string>
#include <vector>

namespace {

struct Site {
  std::string name;
  bool backward;  // a gradient operand: E5M2 under HYBRID
  float scale = 1.f;
  std::vector<float> history;  // ring of past amaxes
  int64_t filled = 0;          // steps recorded so far
};

struct Fp8 : loom::sdk::PrecisionPlugin, loom::sdk::Stateful {
  static constexpr loom_option_spec kOptions[] = {
      {"format", LOOM_OPT_STRING, "\"hybrid\"",
       "hybrid (E4M3 forward, E5M2 gradients) or e4m3 (both)"},
      {"amax_history_len", LOOM_OPT_INT, "1024", "steps of amax history per tensor"},
      {"amax_compute_algo", LOOM_OPT_STRING, "\"max\"", "max (over the history) or most_recent"},
      {"margin", LOOM_OPT_INT, "0", "scale = (fp8_max / amax) / 2^margin"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom::sdk::About about{
      .name = "fp8",
      .version = "1.0.0",
      .summary = "fp8 GEMM operands (E4M3 forward, E5M2 backward), delayed scaling",
      .options = kOptions,
      .compute_dtype = LOOM_FP8_E4M3};

  explicit Fp8(const loom::sdk::Context& ctx)
      : history_len_(ctx.options.i64("amax_history_len")), margin_(ctx.options.i64("margin")) {
    using loom::sdk::ConfigError;
    const std::string format = ctx.options.str("format"),
                      algo = ctx.options.str("amax_compute_algo");
    if (format != "hybrid" && format != "e4m3")
      throw ConfigError("format must be \"hybrid\" or \"e4m3\", got \"" + format + "\"");
    if (algo != "max" && algo != "most_recent")
      throw ConfigError("amax_compute_algo must be \"max\" or \"most_recent\", got \"" + algo +
                        "\"");
    if (history_len_ < 1)
      throw ConfigError("amax_history_len must be >= 1, got " + std::to_string(history_len_));
    if (margin_ < 0) throw ConfigError("margin must be >= 0, got " + std::to_string(margin_));
    hybrid_ = format == "hybrid";
    most_recent_ = algo == "most_recent";
  }

  // A site loaded from saved state before the model named it keeps its history and id.
  int32_t add_site(const std::string& site, loom_operand_role role) override {
    for (size_t i = registered_; i < sites_.size(); ++i)
      if (sites_[i].name == site) {
        if (i != registered_)
          throw loom::sdk::Error(LOOM_BAD_CONFIG, "fp8 scaling state has site '" + site +
                                                      "' at position " + std::to_string(i) +
                                                      ", the model names it " +
                                                      std::to_string(registered_) + "th");
        sites_[i].backward = role == LOOM_OPERAND_GRADIENT;
        return static_cast<int32_t>(registered_++);
      }
    if (registered_ < sites_.size())
      throw loom::sdk::Error(LOOM_BAD_CONFIG, "fp8 scaling state names site '" +
                                                  sites_[registered_].name +
                                                  "' where this model has '" + site + "'");
    ++registered_;
    sites_.push_back({site, role == LOOM_OPERAND_GRADIENT});
    sites_.back().history.assign(history_len_, 0.f);
    return static_cast<int32_t>(sites_.size() - 1);
  }

  loom_operand_format site_format(int32_t id) override {
    const Site& s = sites_.at(id);
    return {s.backward && hybrid_ ? LOOM_FP8_E5M2 : LOOM_FP8_E4M3, s.scale};
  }

  // stats_ = [amax of each site this step | 1 if the site clipped this step]
  void observe(int32_t id, float amax, bool clipped) override {
    grow_stats();
    if (!(amax <= INFINITY)) amax = INFINITY;  // NaN: a poisoned tensor, kept out of the scale
    float& a = stats_[id];
    a = std::max(a, amax);
    if (clipped) stats_[sites_.size() + id] = 1.f;
  }

  float* step_stats(int64_t& n) override {
    grow_stats();
    n = static_cast<int64_t>(stats_.size());
    return stats_.data();
  }

  // The reduced amaxes enter each site's history; a non-finite one (an overflowed step) is left
  // out so that one bad step cannot zero a scale. Then every scale moves.
  bool end_step(bool) override {
    grow_stats();
    const size_t n = sites_.size();
    saturated_ = 0;
    for (size_t i = 0; i < n; ++i) {
      Site& s = sites_[i];
      saturated_ += stats_[n + i] > 0.f;
      const float amax = stats_[i];
      if (std::isfinite(amax)) s.history[s.filled++ % history_len_] = amax;
      if (s.filled == 0) continue;
      const float recent = s.history[(s.filled - 1) % history_len_];
      const float used =
          most_recent_ ? recent
                       : *std::max_element(s.history.begin(),
                                           s.history.begin() + std::min(s.filled, history_len_));
      // A tiny amax would give an infinite scale (and 0 * inf = NaN): clamp it, as TE does.
      if (used > 0.f)
        s.scale = std::min(std::ldexp(fp8_max(s) / used, -static_cast<int>(margin_)), FLT_MAX);
    }
    std::fill(stats_.begin(), stats_.end(), 0.f);
    return false;
  }

  void metrics(std::vector<std::pair<const char*, double>>& out) override {
    out.push_back({"fp8_saturated_tensors", static_cast<double>(saturated_)});
    out.push_back({"fp8_tensors", static_cast<double>(sites_.size())});
  }

  // Per site: scale, steps filled, then the history ring, as raw little-endian fields; the
  // site names come first so a load into another model is refused instead of misapplied.
  std::string save_state() override {
    std::string out;
    auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
    const int64_t count = static_cast<int64_t>(sites_.size());
    put(&count, 8);
    put(&history_len_, 8);
    for (const Site& s : sites_) {
      const int64_t len = static_cast<int64_t>(s.name.size());
      put(&len, 8);
      put(s.name.data(), s.name.size());
      put(&s.scale, 4);
      put(&s.filled, 8);
      put(s.history.data(), 4 * s.history.size());
    }
    return out;
  }

  void load_state(const std::string& bytes) override {
    size_t at = 0;
    auto get = [&](void* p, size_t n) {
      if (at + n > bytes.size())
        throw loom::sdk::Error(LOOM_BAD_CONFIG, "fp8 scaling state is truncated");
      std::memcpy(p, bytes.data() + at, n);
      at += n;
    };
    int64_t count = 0, len = 0;
    get(&count, 8);
    get(&len, 8);
    if (len != history_len_)
      throw loom::sdk::Error(LOOM_BAD_CONFIG, "fp8 scaling state has amax_history_len " +
                                                  std::to_string(len) + ", this run " +
                                                  std::to_string(history_len_));
    std::vector<Site> sites;
    for (int64_t i = 0; i < count; ++i) {
      Site s;
      int64_t n = 0;
      get(&n, 8);
      s.name.resize(n);
      get(s.name.data(), n);
      get(&s.scale, 4);
      get(&s.filled, 8);
      s.history.resize(history_len_);
      get(s.history.data(), 4 * history_len_);
      const bool known = i < static_cast<int64_t>(registered_);
      if (known && sites_[i].name != s.name)
        throw loom::sdk::Error(LOOM_BAD_CONFIG, "fp8 scaling state names site '" + s.name +
                                                    "' where this model has '" + sites_[i].name +
                                                    "'");
      s.backward = known ? sites_[i].backward : s.name.ends_with(".dy");
      sites.push_back(std::move(s));
    }
    if (at != bytes.size())
      throw loom::sdk::Error(LOOM_BAD_CONFIG, "fp8 scaling state has trailing bytes");
    // Sites the model already named keep their ids, so the state must cover exactly those.
    if (registered_ > 0 && sites.size() != registered_)
      throw loom::sdk::Error(LOOM_BAD_CONFIG,
                             "fp8 scaling state has " + std::to_string(sites.size()) +
                                 " tensors, this model " + std::to_string(registered_));
    sites_ = std::move(sites);
    stats_.clear();
  }

 private:
  float fp8_max(const Site& s) const { return s.backward && hybrid_ ? 57344.f : 448.f; }
  void grow_stats() {
    const size_t n = sites_.size();
    if (stats_.size() == 2 * n) return;
    std::vector<float> grown(2 * n, 0.f);
    const size_t old = stats_.size() / 2;
    for (size_t i = 0; i < old; ++i) {
      grown[i] = stats_[i];
      grown[n + i] = stats_[old + i];
    }
    stats_ = std::move(grown);
  }

  int64_t history_len_, margin_;
  bool hybrid_ = true, most_recent_ = false;
  std::vector<Site> sites_;  // [0, registered_) named by the model; the rest loaded, not yet named
  size_t registered_ = 0;
  std::vector<float> stats_;
  int64_t saturated_ = 0;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::precision_plugin<Fp8>())
