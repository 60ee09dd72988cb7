#include "plan/calibration.hpp"

#include <algorithm>
#include <cstdio>

#include "loader/plugin_settings.hpp"
#include "plan/from_config.hpp"
#include "plan/published.hpp"
#include "plan/sources.hpp"

namespace loom::plan {

namespace {

double micro_tokens(const Layout& l, int64_t seq_len) {
  return double(l.micro_batch) * double(seq_len) / l.cp;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

std::string count(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}

// Against the runs here: micro-batches no thinner than theirs, cp over sequences no shorter.
std::vector<std::string> outside_shapes(const Calibration& cal, const Workload& w,
                                        const Layout& l) {
  if (cal.here.empty()) return {"no calibration run on this cluster"};
  std::vector<std::string> why;
  const int64_t T = w.model.seq_len;
  double thinnest = 1e300, shortest = 1e300;
  for (const CalibrationPoint& p : cal.here) {
    thinnest = std::min(thinnest, micro_tokens(p.layout, p.seq_len));
    if (p.layout.cp > 1) shortest = std::min(shortest, double(p.seq_len) / p.layout.cp);
  }
  if (micro_tokens(l, T) < thinnest)
    why.push_back("micro-batches of " + count(micro_tokens(l, T)) +
                  " tokens per rank, thinner than any calibration run's here (" + count(thinnest) +
                  ")");
  if (l.cp > 1 && shortest == 1e300)
    why.push_back("no calibration run here uses cp");
  else if (l.cp > 1 && double(T) / l.cp < shortest)
    why.push_back("cp over " + count(double(T) / l.cp) +
                  " positions per rank, shorter than any calibration run's here (" +
                  count(shortest) + ")");
  return why;
}

}  // namespace

std::vector<std::string> features(const Workload& w, const Layout& l) {
  std::vector<std::string> out;
  if (l.tp > 1) out.push_back("tp");
  if (l.sp) out.push_back("sp");
  if (l.pp > 1) out.push_back("pp " + l.schedule);
  if (l.cp > 1) out.push_back("cp");
  if (l.ep > 1) out.push_back("ep");
  if (l.zero) out.push_back("zero" + std::to_string(l.zero));
  if (l.recompute != "none") out.push_back("recompute " + l.recompute);
  for (const std::string* own :
       {&w.data_plugin, &w.tensor_plugin, &w.sequence_plugin, &w.context_plugin, &w.expert_plugin})
    if (!own->empty()) out.push_back("plugin '" + *own + "'");
  return out;
}

Calibration calibration_of(const Cluster& c) {
  Calibration cal;
  for (const PublishedRun& run : published_runs()) {
    for (const std::string& f : features(run.workload, run.layout)) cal.features.insert(f);
    if (run.cluster != c.name) continue;
    PluginSources sources = published_sources(run);
    const Estimate e = estimate(c, run.workload, run.layout, sources.costs(), sources.pipes());
    const double ratio = predicted_metric(run, e) / run.published;
    cal.here.push_back({run.name, run.layout, run.workload.model.seq_len, ratio - 1});
    if (e.mfu / ratio > cal.best_mfu) cal.best_mfu = e.mfu / ratio, cal.best_mfu_run = run.name;
  }
  for (size_t i = 0; i < c.calibration.layouts.size(); ++i) {
    const Layout l = parse_layout(c.calibration.layouts[i]);
    for (const std::string& f : features(Workload{}, l)) cal.features.insert(f);
    cal.here.push_back(
        {"measured: " + l.name(), l, c.calibration.seq_len, c.calibration.residuals[i]});
  }
  // The band: the leave-one-out residuals of the fit ([fit]), where the efficiencies were fitted
  // (an in-sample residual flatters the model that was fitted to it), and the measured layouts.
  const bool fitted = c.fit.band.size() == 2;
  if (fitted) {
    cal.low = c.fit.band[0], cal.high = c.fit.band[1];
    cal.band_source = "the leave-one-out residuals of the " + std::to_string(c.fit.runs) +
                      " published runs of kind '" + c.kind + "' its efficiencies are fitted to";
  }
  bool first = !fitted;
  for (const CalibrationPoint& p : cal.here) {
    if (fitted && p.what.rfind("measured: ", 0) != 0) continue;
    cal.low = first ? p.residual : std::min(cal.low, p.residual);
    cal.high = first ? p.residual : std::max(cal.high, p.residual);
    first = false;
  }
  return cal;
}

std::string extrapolation(const Calibration& cal, const Workload& w, const Layout& l) {
  std::vector<std::string> missing;
  for (const std::string& f : features(w, l))
    if (!cal.features.count(f)) missing.push_back(f);
  std::vector<std::string> why;
  if (!missing.empty()) why.push_back("no calibration run uses " + join(missing, ", "));
  for (const std::string& s : outside_shapes(cal, w, l)) why.push_back(s);
  return join(why, "; ");
}

void judge(Estimate& e, const Calibration& cal, const Workload& w) {
  if (!cal.here.empty())
    e.band_low_ms = e.step_ms * (1 + cal.low), e.band_high_ms = e.step_ms * (1 + cal.high);
  e.extrapolated = extrapolation(cal, w, e.layout);
}

void rank_plausibly(std::vector<Estimate>& rows) {
  auto key = [](const Estimate& e) {
    return !e.extrapolated.empty() && e.band_high_ms > 0 ? e.band_high_ms : e.step_ms;
  };
  // The search put the fitting layouts first; those that do not fit keep its order (smallest
  // first).
  const auto fitting =
      std::stable_partition(rows.begin(), rows.end(), [](const Estimate& e) { return e.fits; });
  std::stable_sort(rows.begin(), fitting,
                   [&](const Estimate& a, const Estimate& b) { return key(a) < key(b); });
}

Estimate predict(const Cluster& c, const train::JobSettings& job, int world) {
  PluginSources sources(plugins::Registry::default_dirs(job.plugins.path), job.plugins.tables);
  const Workload w = workload_of(job);
  Estimate e = estimate(c, w, layout_of(job, world), sources.costs(), sources.pipes());
  judge(e, calibration_of(c), w);
  return e;
}

}  // namespace loom::plan
