// Finite-difference gradient checks for fp32 kernels.
//
// The loss is L = sum_i out_i * r_i for a fixed random r, evaluated in double from the fp32
// kernel's output. Central differences with step h on fp32 inputs have error O(h^2) plus fp32
// rounding O(eps_f32 * |L| / h); h = 1e-2 balances them. The stated tolerance is 2e-2 relative
// to the larger of |numeric|, |analytic| and 1e-2 * max|analytic| over the tensor: coordinates
// whose gradient is under 1% of the tensor's largest are held to an absolute error of
// 2e-4 * max|analytic| instead, because fp32 noise alone exceeds 2% of them. A wrong gradient
// (a missing term, a transposed index) is off by O(1) and fails either way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace loom::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

constexpr double kGradTolerance = 2e-2;

// (L(x + h e_i) - L(x - h e_i)) / 2h, leaving x as it was.
template <class Loss>
double numeric_gradient(std::vector<float>& x, size_t i, Loss&& loss, float h) {
  float keep = x[i];
  x[i] = keep + h;
  double lp = loss();
  x[i] = keep - h;
  double lm = loss();
  x[i] = keep;
  return (lp - lm) / (2.0 * h);
}

// Largest relative error over up to `samples` coordinates of x. `loss()` must read x.
template <class Loss>
double grad_error(std::vector<float>& x, const std::vector<float>& analytic, Loss&& loss,
                  int samples = 64, float h = 1e-2f) {
  double amax = 0;
  for (float a : analytic) amax = std::max(amax, static_cast<double>(std::fabs(a)));
  double worst = 0;
  size_t stride = std::max<size_t>(1, x.size() / samples);
  for (size_t i = 0; i < x.size(); i += stride) {
    double numeric = numeric_gradient(x, i, loss, h);
    double denom = std::max(
        {std::fabs(numeric), std::fabs(static_cast<double>(analytic[i])), 1e-2 * amax, 1e-6});
    worst = std::max(worst, std::fabs(numeric - analytic[i]) / denom);
  }
  return worst;
}

// Relative L2 error ||numeric - analytic|| / ||analytic|| over up to `samples` coordinates: the
// whole-model check, where a tensor's coordinates mix large and tiny gradients and per-element
// ratios would measure fp32 noise rather than the gradient. Stated tolerance: 1e-2.
constexpr double kModelGradTolerance = 1e-2;
template <class Loss>
double grad_error_l2(std::vector<float>& x, const std::vector<float>& analytic, Loss&& loss,
                     int samples = 24, float h = 1e-2f) {
  double diff = 0, norm = 0;
  size_t stride = std::max<size_t>(1, x.size() / samples);
  for (size_t i = 0; i < x.size(); i += stride) {
    double numeric = numeric_gradient(x, i, loss, h);
    diff += (numeric - analytic[i]) * (numeric - analytic[i]);
    norm += static_cast<double>(analytic[i]) * analytic[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-9);
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace loom::test
