#include "data/blend.hpp"

#include <cmath>

namespace loom::data {

Blend::Blend(std::vector<double> weights) : prefix_{0.0} {
  for (double w : weights) prefix_.push_back(prefix_.back() + w);
}

int64_t Blend::left_of(int lo, int mid, int hi, int64_t n) const {
  const double all = prefix_[hi] - prefix_[lo];
  if (all <= 0) return 0;  // a half without weight gets no samples to share
  const double p = (prefix_[mid] - prefix_[lo]) / all;
  return static_cast<int64_t>(std::floor(static_cast<double>(n) * p + 0.5));
}

std::pair<int, int64_t> Blend::route(int64_t g) const {
  int lo = 0, hi = sources();
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    const int64_t before = left_of(lo, mid, hi, g), after = left_of(lo, mid, hi, g + 1);
    if (after > before) {
      hi = mid, g = before;
    } else {
      lo = mid, g -= before;
    }
  }
  return {lo, g};
}

int64_t Blend::count(int s, int64_t g) const {
  int lo = 0, hi = sources();
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    const int64_t left = left_of(lo, mid, hi, g);
    if (s < mid) {
      hi = mid, g = left;
    } else {
      lo = mid, g -= left;
    }
  }
  return g;
}

}  // namespace loom::data
