// The efficiencies of a device kind, fitted to the published runs on it, and how well they
// predict a run they were not fitted to (leave-one-out cross-validation).
//
// A kind's runs share one set of efficiencies: GEMM, fused and unfused attention, element-wise
// (memory), the collectives' bandwidth factor and the compute lost to overlapped communication.
// The fit minimises sum_i log(predicted_i / published_i)^2 + lambda sum_k (theta_k - theta0_k)^2
// by Levenberg-Marquardt from generic starting values over theta = log(efficiency) (overlap_cost:
// the value itself), with finite-difference Jacobians, then a pattern search. The ridge term
// (lambda = 0.02) holds an efficiency that no run constrains at its generic starting value
// instead of letting it drift.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "plan/cluster.hpp"
#include "plan/published.hpp"

namespace loom::plan {

constexpr int kFitted = 6;
// The [efficiency] keys fitted, in FitValues order.
extern const char* const kFittedKeys[kFitted];

struct FitValues {
  double v[kFitted] = {0.7, 0.5, 0.5, 0.7, 0.8, 0};  // gemm .. overlap_cost
};
FitValues fit_values_of(const Cluster& c);
void apply(const FitValues& f, Cluster& c);

// The runs of one kind and the clusters they ran on (by name).
struct FitSet {
  std::string kind;
  std::vector<const PublishedRun*> runs;
  std::map<std::string, Cluster> clusters;
};

// Every published run, grouped by its cluster's device kind ([device] kind; a file without one
// is a kind of its own); clusters read from `dir`.
std::vector<FitSet> fit_sets(const std::string& dir);

// log(predicted / published) of each run in `runs` under `f`.
std::vector<double> log_errors(const FitSet& set, const std::vector<const PublishedRun*>& runs,
                               const FitValues& f);

struct FitResult {
  FitValues values;
  double rms = 0;  // of the runs' log errors
  int iterations = 0;
};
// Fits `set`'s runs except `left_out` (-1: none), from the generic starting values.
FitResult fit(const FitSet& set, int left_out = -1);

// Each run predicted by the fit without it: predicted / published - 1, in set order. `progress`
// is called after each run.
std::vector<double> leave_one_out(const FitSet& set,
                                  const std::function<void(size_t done)>& progress = {});
// The median of |e| over the errors (0 for none): the [fit] median a cluster file states.
double median_abs(std::vector<double> errors);

}  // namespace loom::plan
