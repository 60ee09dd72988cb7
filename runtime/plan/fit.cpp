#include "plan/fit.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/errors.hpp"

namespace loom::plan {

const char* const kFittedKeys[kFitted] = {"gemm",   "attention", "attention_unfused",
                                          "memory", "comm",      "overlap_cost"};

namespace {

// Where the fit starts and what its ridge holds an unconstrained efficiency at: generic figures,
// the same for every kind, so that no run's figure leaks into its own leave-one-out prior.
const FitValues kPrior = {{0.7, 0.5, 0.3, 0.75, 0.8, 0.0}};
constexpr double kLambda = 0.02;
constexpr double kLow[kFitted] = {0.05, 0.05, 0.05, 0.05, 0.05, 0.0};
constexpr double kHigh[kFitted] = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0};

// theta: the log of each efficiency; overlap_cost, which may be 0, as itself.
bool logged(int k) { return k < kFitted - 1; }
double to_theta(int k, double v) { return logged(k) ? std::log(v) : v; }
double to_value(int k, double t) {
  const double v = logged(k) ? std::exp(t) : t;
  return std::clamp(v, kLow[k], kHigh[k]);
}

using Theta = std::array<double, kFitted>;

Theta theta_of(const FitValues& f) {
  Theta t;
  for (int k = 0; k < kFitted; ++k) t[k] = to_theta(k, std::clamp(f.v[k], kLow[k], kHigh[k]));
  return t;
}
FitValues values_of(const Theta& t) {
  FitValues f;
  for (int k = 0; k < kFitted; ++k) f.v[k] = to_value(k, t[k]);
  return f;
}

// The runs' log errors, then the ridge's sqrt(lambda) (theta - prior).
std::vector<double> residuals(const FitSet& set, const std::vector<const PublishedRun*>& runs,
                              const Theta& t) {
  std::vector<double> r = log_errors(set, runs, values_of(t));
  const Theta prior = theta_of(kPrior);
  for (int k = 0; k < kFitted; ++k) r.push_back(std::sqrt(kLambda) * (t[k] - prior[k]));
  return r;
}

double squares(const std::vector<double>& r) {
  double s = 0;
  for (double x : r) s += x * x;
  return s;
}

// Solves a x = b (kFitted unknowns) by Gaussian elimination with partial pivoting.
Theta solve(std::array<Theta, kFitted> a, Theta b) {
  for (int c = 0; c < kFitted; ++c) {
    int p = c;
    for (int r = c + 1; r < kFitted; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    std::swap(a[c], a[p]), std::swap(b[c], b[p]);
    for (int r = c + 1; r < kFitted; ++r) {
      const double m = a[r][c] / a[c][c];
      for (int k = c; k < kFitted; ++k) a[r][k] -= m * a[c][k];
      b[r] -= m * b[c];
    }
  }
  Theta x{};
  for (int c = kFitted - 1; c >= 0; --c) {
    double s = b[c];
    for (int k = c + 1; k < kFitted; ++k) s -= a[c][k] * x[k];
    x[c] = s / a[c][c];
  }
  return x;
}

// J^T J and J^T r, J by finite differences (forward, or backward at an upper bound).
void normal_equations(const FitSet& set, const std::vector<const PublishedRun*>& runs,
                      const Theta& t, const std::vector<double>& r, std::array<Theta, kFitted>& jtj,
                      Theta& jtr) {
  std::vector<std::vector<double>> cols(kFitted);
  for (int k = 0; k < kFitted; ++k) {
    Theta moved = t;
    // At the upper bound a forward step is clamped away: difference backwards there.
    const double h = to_value(k, t[k] + 1e-3) > to_value(k, t[k]) ? 1e-3 : -1e-3;
    moved[k] += h;
    cols[k] = residuals(set, runs, moved);
    for (size_t i = 0; i < r.size(); ++i) cols[k][i] = (cols[k][i] - r[i]) / h;
  }
  for (int a = 0; a < kFitted; ++a) {
    jtr[a] = 0;
    for (size_t i = 0; i < r.size(); ++i) jtr[a] += cols[a][i] * r[i];
    for (int b = 0; b < kFitted; ++b) {
      jtj[a][b] = 0;
      for (size_t i = 0; i < r.size(); ++i) jtj[a][b] += cols[a][i] * cols[b][i];
    }
  }
}

// A pattern search after Levenberg-Marquardt stops: each theta moved alone by shrinking steps
// while that lowers the cost. The overlap windows make the cost piecewise smooth, and at a kink
// the forward-difference Jacobian can stop Levenberg-Marquardt short of the minimum.
void polish(const FitSet& set, const std::vector<const PublishedRun*>& runs, Theta& t,
            std::vector<double>& r, double& cost) {
  for (double size : {0.1, 0.03, 0.01, 0.003}) {
    for (bool better = true; better;) {
      better = false;
      for (int k = 0; k < kFitted; ++k)
        for (double sign : {1.0, -1.0}) {
          Theta next = t;
          next[k] = to_theta(k, to_value(k, t[k] + sign * size));
          std::vector<double> rn = residuals(set, runs, next);
          if (const double cn = squares(rn); cn < cost * (1 - 1e-9))
            t = next, r = std::move(rn), cost = cn, better = true;
        }
    }
  }
}

}  // namespace

FitValues fit_values_of(const Cluster& c) {
  return {{c.gemm_eff, c.attention_eff, c.attention_unfused_eff, c.memory_eff, c.comm_eff,
           c.overlap_cost}};
}

void apply(const FitValues& f, Cluster& c) {
  c.gemm_eff = f.v[0], c.attention_eff = f.v[1], c.attention_unfused_eff = f.v[2];
  c.memory_eff = f.v[3], c.comm_eff = f.v[4], c.overlap_cost = f.v[5];
}

std::vector<FitSet> fit_sets(const std::string& dir) {
  std::vector<FitSet> sets;
  for (const PublishedRun& run : published_runs()) {
    Cluster c = load_cluster(std::filesystem::path(dir) / (run.cluster + ".toml"));
    const std::string kind = c.kind.empty() ? c.name : c.kind;  // a file is its own kind
    auto it =
        std::find_if(sets.begin(), sets.end(), [&](const FitSet& s) { return s.kind == kind; });
    if (it == sets.end()) it = sets.insert(sets.end(), FitSet{kind, {}, {}});
    it->runs.push_back(&run);
    it->clusters.emplace(run.cluster, std::move(c));
  }
  return sets;
}

std::vector<double> log_errors(const FitSet& set, const std::vector<const PublishedRun*>& runs,
                               const FitValues& f) {
  std::map<std::string, Cluster> clusters = set.clusters;
  for (auto& [name, c] : clusters) apply(f, c);
  std::vector<double> out;
  for (const PublishedRun* run : runs) {
    PluginSources sources = published_sources(*run);
    const Estimate e = estimate(clusters.at(run->cluster), run->workload, run->layout,
                                sources.costs(), sources.pipes());
    out.push_back(std::log(predicted_metric(*run, e) / run->published));
  }
  return out;
}

FitResult fit(const FitSet& set, int left_out) {
  std::vector<const PublishedRun*> runs;
  for (size_t i = 0; i < set.runs.size(); ++i)
    if (int(i) != left_out) runs.push_back(set.runs[i]);
  Theta t = theta_of(kPrior);
  std::vector<double> r = residuals(set, runs, t);
  double cost = squares(r), mu = 1e-3;
  FitResult out;
  for (out.iterations = 0; out.iterations < 40; ++out.iterations) {
    std::array<Theta, kFitted> jtj;
    Theta jtr;
    normal_equations(set, runs, t, r, jtj, jtr);
    bool moved = false;
    while (mu < 1e8 && !moved) {
      std::array<Theta, kFitted> a = jtj;
      Theta minus_g;
      for (int k = 0; k < kFitted; ++k) a[k][k] += mu * (jtj[k][k] + 1e-9), minus_g[k] = -jtr[k];
      for (int k = 0; k < kFitted; ++k) {  // a bound the gradient pushes against holds its value
        const double v = to_value(k, t[k]);
        if ((v <= kLow[k] && jtr[k] > 0) || (v >= kHigh[k] && jtr[k] < 0)) {
          for (int j = 0; j < kFitted; ++j) a[k][j] = a[j][k] = 0;
          a[k][k] = 1, minus_g[k] = 0;
        }
      }
      const Theta step = solve(a, minus_g);
      Theta next;  // moved, and held inside the bounds
      for (int k = 0; k < kFitted; ++k) next[k] = to_theta(k, to_value(k, t[k] + step[k]));
      std::vector<double> rn = residuals(set, runs, next);
      const double cn = squares(rn);
      if (cn < cost) {
        moved = true;
        const bool settled = cost - cn < 1e-7 * cost;
        t = next, r = std::move(rn), cost = cn, mu = std::max(mu / 3, 1e-7);
        if (settled) mu = 1e9;  // converged: stop after this step
      } else {
        mu *= 4;
      }
    }
    if (!moved || mu >= 1e8) break;
  }
  polish(set, runs, t, r, cost);
  out.values = values_of(t);
  double sum = 0;
  for (size_t i = 0; i < runs.size(); ++i) sum += r[i] * r[i];
  out.rms = runs.empty() ? 0 : std::sqrt(sum / runs.size());
  return out;
}

std::vector<double> leave_one_out(const FitSet& set, const std::function<void(size_t)>& progress) {
  std::vector<double> out;
  for (size_t i = 0; i < set.runs.size(); ++i) {
    const FitResult without = fit(set, int(i));
    out.push_back(std::exp(log_errors(set, {set.runs[i]}, without.values)[0]) - 1);
    if (progress) progress(i + 1);
  }
  return out;
}

double median_abs(std::vector<double> errors) {
  for (double& x : errors) x = std::fabs(x);
  std::sort(errors.begin(), errors.end());
  const size_t n = errors.size();
  if (n == 0) return 0;
  return n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
}

}  // namespace loom::plan
