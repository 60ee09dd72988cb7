// How far `loom plan` can be trusted on a cluster: the runs it was checked against there (the
// published runs on that machine kind, and the layouts measured into the cluster file's
// [calibration]), the spread of its errors on them, and whether a layout lies inside what they
// cover. A prediction carries that spread as its band; a layout outside is flagged, with why.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "plan/cluster.hpp"
#include "plan/estimate.hpp"
#include "train/job_settings.hpp"

namespace loom::plan {

struct CalibrationPoint {
  std::string what;  // "Llama 3 405B, 16384 H100", or "measured: dp2 zero1 mb8"
  Layout layout;
  int64_t seq_len = 0;
  double residual = 0;  // measured over predicted step time, less 1
};

struct Calibration {
  std::vector<CalibrationPoint> here;  // on this cluster: the band and the shapes it covers
  std::set<std::string> features;      // every feature of every published or measured run
  // The smallest and largest residual: the fit's leave-one-out band ([fit]) and the measured
  // layouts here; without a fit, every run's here.
  double low = 0, high = 0;
  std::string band_source;  // what the band comes from, for the table's note
  // The highest MFU a published run here reached (its figure in Loom's count), and which run: a
  // claim above it has nothing measured behind it.
  double best_mfu = 0;
  std::string best_mfu_run;
};

// The published runs on `c`'s machine kind (planned on `c`), and its [calibration] layouts.
Calibration calibration_of(const Cluster& c);

// What a layout relies on, as calibration runs are matched: "tp", "sp", "pp 1f1b", "cp", "ep",
// "zero1", "recompute full", and "plugin 'NAME'" for a slot filled by a third-party plugin.
std::vector<std::string> features(const Workload& w, const Layout& l);

// Why a layout lies outside what the calibration covers ("" when inside): a feature no run used,
// micro-batches thinner than any run's here, cp over shorter sequences than any run's here.
std::string extrapolation(const Calibration& cal, const Workload& w, const Layout& l);

// Sets e's band (measured step time between step x (1 + low) and step x (1 + high)) and its
// extrapolation.
void judge(Estimate& e, const Calibration& cal, const Workload& w);

// Orders a search's fitting rows as the table ranks them (the rest keep the search's order): a
// layout inside the
// calibrated region by its predicted step, an extrapolated one by the pessimistic end of its band
// (stable otherwise).
void rank_plausibly(std::vector<Estimate>& rows);

// loom plan's prediction for a config as it stands, on `c`, with its plugins' options and the band
// and extrapolation of c's calibration (`loom compare --cluster`, [run] plan_cluster).
Estimate predict(const Cluster& c, const train::JobSettings& job, int world = 0);

}  // namespace loom::plan
