#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/plan_ranking.hpp"
#include "core/errors.hpp"
#include "core/json_line.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/registry.hpp"
#include "plan/calibration.hpp"
#include "plan/cluster.hpp"
#include "plan/from_config.hpp"
#include "plan/search.hpp"
#include "plan/sources.hpp"

namespace loom::cli {

namespace {

using plan::Estimate;

// "-12%..+80%": where the calibration runs here put the step, relative to the prediction.
std::string band(const Estimate& e) {
  if (e.band_high_ms <= 0) return "none";
  char b[48];
  std::snprintf(b, sizeof b, "%+.0f%%..%+.0f%%", 100 * (e.band_low_ms / e.step_ms - 1),
                100 * (e.band_high_ms / e.step_ms - 1));
  return b;
}

void print_table(const std::vector<Estimate>& rows, size_t top, double best_mfu) {
  int width =
      36;  // the layout column grows to its longest name, so the columns after it stay in line
  for (size_t i = 0; i < rows.size() && i < top; ++i)
    width = std::max(width, static_cast<int>(rows[i].layout.name().size()));
  std::printf("%4s  %-*s %10s %11s %6s %10s %9s %5s %8s %7s %13s %7s\n", "#", width, "layout",
              "step ms", "tok/s/dev", "MFU", "TFLOP/s/d", "mem GiB", "fits", "exp.comm", "bubble",
              "band", "region");
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const Estimate& e = rows[i];
    const bool above = best_mfu > 0 && e.mfu > best_mfu;  // nothing measured reached it here
    std::printf("%4zu  %-*s %10.1f %11.1f %5.1f%%%s %9.2f %9.2f %5s %7.1f%% %6.1f%% %13s %7s\n",
                i + 1, width, e.layout.name().c_str(), e.step_ms, e.tokens_per_s_per_device,
                100 * e.mfu, above ? "!" : " ", e.tflops_per_device, gib(e.memory.total()),
                e.fits ? "yes" : "no", 100 * e.exposed_comm_ms / e.step_ms,
                100 * e.bubble_ms / e.step_ms, band(e).c_str(),
                e.extrapolated.empty() ? "in" : "extrap");
  }
}

// The ranking never puts an extrapolated layout first without saying so, and names the best one
// inside the calibrated region.
void print_region(const std::vector<Estimate>& rows, size_t top, const plan::Calibration& cal) {
  if (cal.here.empty())
    std::printf(
        "\nband: none, as no run was measured on this cluster (RECORD=FILE bench/plan_accuracy.sh "
        "measures some)");
  else if (!cal.band_source.empty())
    std::printf("\nband: %+.1f%%..%+.1f%%, %s", 100 * cal.low, 100 * cal.high,
                cal.band_source.c_str());
  else
    std::printf("\nband: measured step time over predicted on %zu calibration run%s here",
                cal.here.size(), cal.here.size() == 1 ? "" : "s");
  if (cal.band_source.empty())
    for (const auto& p : cal.here)
      std::printf("%s %s %+.1f%%", &p == &cal.here.front() ? ":" : ",", p.what.c_str(),
                  100 * p.residual);
  std::printf("\n");
  const bool marked =
      std::any_of(rows.begin(), rows.begin() + std::min(top, rows.size()),
                  [&](const Estimate& e) { return cal.best_mfu > 0 && e.mfu > cal.best_mfu; });
  if (marked)
    std::printf("MFU!: above the best published run here, %s at %.1f%% (Loom's count)\n",
                cal.best_mfu_run.c_str(), 100 * cal.best_mfu);
  if (!rows.empty() && !rows.front().extrapolated.empty())
    std::printf(
        "ranked: a layout in the calibrated region by its step, an extrapolated one by the "
        "slow end of its band\n");
  if (rows.empty() || rows.front().extrapolated.empty()) return;
  std::printf("note: #1 %s is extrapolated: %s\n", rows.front().layout.name().c_str(),
              rows.front().extrapolated.c_str());
  for (size_t i = 1; i < rows.size(); ++i)
    if (rows[i].extrapolated.empty() && rows[i].fits) {
      std::printf(
          "note: the best layout inside the calibrated region is #%zu %s, %.1f ms (%+.1f%%)\n",
          i + 1, rows[i].layout.name().c_str(), rows[i].step_ms,
          100 * (rows[i].step_ms / rows.front().step_ms - 1));
      return;
    }
  std::printf("note: no fitting layout lies inside the calibrated region\n");
}

nlohmann::ordered_json estimate_json(const Estimate& e) {
  const plan::Layout& l = e.layout;
  nlohmann::ordered_json j;
  j["layout"] = l.name();
  j["dp"] = l.dp, j["tp"] = l.tp, j["pp"] = l.pp, j["cp"] = l.cp, j["ep"] = l.ep;
  j["zero"] = l.zero, j["micro_batch"] = l.micro_batch, j["chunks"] = l.chunks;
  j["sp"] = l.sp, j["schedule"] = l.schedule, j["recompute"] = l.recompute;
  j["step_ms"] = e.step_ms, j["tokens_per_s_per_device"] = e.tokens_per_s_per_device,
  j["mfu"] = e.mfu;
  j["tflops_per_device"] = e.tflops_per_device, j["peak_mem_bytes"] = e.memory.total();
  j["model_state_bytes"] = e.memory.model_states(), j["activation_bytes"] = e.memory.activations;
  j["comm_ms"] = e.comm_ms, j["exposed_comm_ms"] = e.exposed_comm_ms, j["bubble_ms"] = e.bubble_ms;
  j["optimizer_ms"] = e.optimizer_ms, j["band_low_ms"] = e.band_low_ms,
  j["band_high_ms"] = e.band_high_ms;
  j["extrapolated"] = e.extrapolated;
  j["fits"] = e.fits, j["why_not"] = e.why_not;
  return j;
}

void print_explanation(const Estimate& e, const plan::Cluster& c) {
  std::printf("%s on %s: %d micro-batch%s of %d per step\n\n", e.layout.name().c_str(),
              c.name.c_str(), e.microbatches, e.microbatches > 1 ? "es" : "", e.layout.micro_batch);
  auto line = [&](const std::string& what, double ms) {
    std::printf("  %-58s %10.2f ms %6.1f%%\n", what.c_str(), ms, 100 * ms / e.step_ms);
  };
  line("forward (all micro-batches)", e.forward_ms);
  line("backward", e.backward_ms);
  if (e.recompute_ms > 0) line("recompute (" + e.layout.recompute + ")", e.recompute_ms);
  if (e.layout.pp > 1) line("pipeline bubble (" + e.layout.schedule + ")", e.bubble_ms);
  for (const auto& it : e.comms) {
    char what[160];
    std::snprintf(what, sizeof what, "%s: %s, %s %.3g MB x %.3g over %d (%s), exposed",
                  it.plugin.c_str(), it.what.c_str(), it.op.c_str(), it.bytes / 1e6, it.calls,
                  it.group, it.level.c_str());
    line(what, it.exposed_ms);
    if (it.ms > it.exposed_ms)
      std::printf("  %-58s %10.2f ms\n", "    (of which hidden behind compute)",
                  it.ms - it.exposed_ms);
  }
  line("optimizer (AdamW, grad norm)", e.optimizer_ms);
  if (e.overhead_ms > 0) line("per-step overhead (calibrated)", e.overhead_ms);
  std::printf("  %-58s %10.2f ms\n\n", "step", e.step_ms);
  std::printf("MFU %.1f%%, %.2f TFLOP/s and %.1f tokens/s per device\n", 100 * e.mfu,
              e.tflops_per_device, e.tokens_per_s_per_device);
  std::printf(
      "memory per rank: parameters %.3f GiB, gradients %.3f, optimizer %.3f, activations %.3f, "
      "buffers %.3f, "
      "runtime %.3f = %.3f GiB of %.1f (%s)\n",
      gib(e.memory.params), gib(e.memory.grads), gib(e.memory.optim), gib(e.memory.activations),
      gib(e.memory.buffers), gib(e.memory.process), gib(e.memory.total()), gib(c.memory),
      e.fits ? "fits" : e.why_not.c_str());
  if (e.band_high_ms > 0)
    std::printf("band: the calibration runs here put the step between %.1f and %.1f ms\n",
                e.band_low_ms, e.band_high_ms);
  if (!e.extrapolated.empty()) std::printf("extrapolated: %s\n", e.extrapolated.c_str());
  for (const auto& n : e.notes) std::printf("note: %s\n", n.c_str());
}

// How many devices to plan: --nodes or --devices, else one node (a CPU machine: [parallel] nproc).
int devices_to_plan(const PlanOptions& o, const plan::Cluster& c, const train::JobSettings& job) {
  int64_t asked = c.shared_cores > 0 ? job.parallel.nproc : c.per_node;
  if (o.nodes && o.devices) throw UsageError("give --nodes or --devices, not both");
  // In 64 bits: 300,000,000 nodes of 8 is past an int, not "less than 1".
  if (o.nodes) asked = int64_t{*o.nodes} * c.per_node;
  if (o.devices) asked = *o.devices;
  if (asked < 1) throw UsageError("--nodes and --devices must be at least 1");
  if (asked > c.devices())
    throw ConfigError(std::to_string(asked) + " devices asked, but cluster '" + c.name + "' (" +
                      c.source + ") has " + std::to_string(c.nodes) + " node" +
                      (c.nodes > 1 ? "s" : "") + " of " + std::to_string(c.per_node) + " = " +
                      std::to_string(c.devices()));
  return static_cast<int>(asked);
}

// A layout named on the command line, checked as the search checks its own: it must use the
// planned devices and be one a run would start (the run's own words otherwise).
plan::Layout named_layout(const std::string& option, const std::string& text, int devices,
                          const plan::Workload& w, plan::PluginSources& sources) {
  const plan::Layout l = plan::parse_layout(text);
  std::string bad = l.world() != devices
                        ? "uses " + std::to_string(l.world()) + " devices, not the " +
                              std::to_string(devices) + " planned for (set --devices or --nodes)"
                        : plan::planner_limits(w, l);
  if (bad.empty()) bad = sources.problems()(w, l);
  if (!bad.empty()) throw ConfigError(option + " " + l.name() + ": " + bad);
  return l;
}

void print_versus(const plan::SearchResult& r, const Estimate& e) {
  size_t rank = 0;
  while (rank < r.ranked.size() && r.ranked[rank].layout.name() != e.layout.name()) ++rank;
  const std::string where =
      rank < r.ranked.size()
          ? "rank " + std::to_string(rank + 1) + " of " + std::to_string(r.ranked.size())
          : "not among the ranked layouts (--fix leaves it out)";
  std::printf("versus %s: %.1f ms, %s; %s\n", e.layout.name().c_str(), e.step_ms, where.c_str(),
              rank == 0 ? "it is the top layout" : plan::versus(r.ranked.front(), e).c_str());
}

// One node kind: every layout of the planned devices that would run, ranked by the search when
// the table, --json, --versus or a rank asks for it; a layout named by --explain or --emit is
// costed on its own, without a search.
class UniformRanking final : public Ranking {
 public:
  UniformRanking(const PlanOptions& o, const train::JobSettings& job)
      : o_(o),
        c_(plan::load_cluster(o.cluster)),
        w_(plan::on_cluster(plan::workload_of(job, o.dtype), c_)),
        devices_(devices_to_plan(o, c_, job)),
        sources_(plugins::Registry::default_dirs(job.plugins.path), job.plugins.tables) {}

  // A named layout's row is numbered from kNamed, apart from the table's, which a later search
  // may fill.
  size_t row(const std::string& option, const std::string& what) override {
    if (!what.empty() && what.find_first_not_of("0123456789") == std::string::npos)
      return *table_row(option, what, ranked().size());
    Estimate e = plan::estimate(c_, w_, named_layout("--" + option, what, devices_, w_, sources_),
                                sources_.costs(), sources_.pipes());
    plan::judge(e, calibration(), w_);
    named_.push_back(e);
    return kNamed + named_.size() - 1;
  }
  size_t size() override { return ranked().size(); }
  nlohmann::ordered_json json(size_t i) const override { return estimate_json(at(i)); }
  void explain(size_t i) const override { print_explanation(at(i), c_); }

  Emitted emitted(size_t i) const override {
    const Estimate& e = at(i);
    char head[320];
    std::snprintf(head, sizeof head,
                  "layout %s, predicted %.1f ms per step, %.1f%% MFU, %.2f GiB per rank on %s.\n",
                  e.layout.name().c_str(), e.step_ms, 100 * e.mfu, gib(e.memory.total()),
                  c_.name.c_str());
    std::string text = head;
    if (!e.extrapolated.empty()) text += "# Extrapolated: " + e.extrapolated + ".\n";
    return {e.layout, e.layout.world(), emit_overrides(o_, w_, e.layout), text, w_.device};
  }

  void table(size_t top) override {
    const std::vector<Estimate>& rows = ranked();
    std::printf("%s, global batch %lld x %lld tokens, %s, on %d x %s (%s)\n",
                w_.model.describe().c_str(), (long long)w_.global_batch,
                (long long)w_.model.seq_len, w_.dtype.c_str(), devices_, c_.device.c_str(),
                c_.name.c_str());
    std::printf("%ld layouts costed in %.2f s (those the named plugins can run)\n\n", r_.considered,
                search_s_);
    print_table(rows, top, calibration().best_mfu);
    print_region(rows, top, calibration());
    std::printf("\nwhy: %s\n", plan::reason(r_).c_str());
    if (o_.versus) {
      const plan::Layout mine = named_layout("--versus", *o_.versus, devices_, w_, sources_);
      const auto it = std::find_if(rows.begin(), rows.end(), [&](const Estimate& e) {
        return e.layout.name() == mine.name();
      });
      print_versus(r_, it != rows.end()
                           ? *it
                           : plan::estimate(c_, w_, mine, sources_.costs(), sources_.pipes()));
    }
    for (const auto& n : r_.notes) std::printf("note: %s\n", n.c_str());
  }

 private:
  const Estimate& at(size_t i) const {
    return i >= kNamed ? named_.at(i - kNamed) : r_.ranked.at(i);
  }

  const plan::Calibration& calibration() {
    if (!cal_) cal_ = plan::calibration_of(c_);
    return *cal_;
  }

  const std::vector<Estimate>& ranked() {
    if (searched_) return r_.ranked;
    const plan::Fixed fixed = plan::parse_fixed(o_.fix);
    const auto t0 = std::chrono::steady_clock::now();
    r_ = plan::search(c_, w_, devices_, fixed, sources_.costs(), sources_.pipes(),
                      sources_.problems());
    for (Estimate& e : r_.ranked) plan::judge(e, calibration(), w_);
    plan::rank_plausibly(r_.ranked);
    search_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    searched_ = true;
    if (r_.ranked.empty())
      throw ConfigError("no layout of " + std::to_string(devices_) + " devices can run this model" +
                        (fixed.values.empty() ? "" : " with the --fix choices"));
    return r_.ranked;
  }

  const PlanOptions& o_;
  const plan::Cluster c_;
  const plan::Workload w_;
  const int devices_;
  plan::PluginSources sources_;
  std::optional<plan::Calibration> cal_;
  plan::SearchResult r_;
  bool searched_ = false;
  double search_s_ = 0;
  static constexpr size_t kNamed = size_t(1) << 40;
  std::vector<Estimate> named_;
};

}  // namespace

std::unique_ptr<Ranking> uniform_ranking(const PlanOptions& o, const train::JobSettings& job) {
  return std::make_unique<UniformRanking>(o, job);
}

}  // namespace loom::cli
