// What the kernel cases share: the distance between a kernel's output and its
// CPU twin's, scaled by the twin's largest magnitude (summation orders differ between the two, so
// fp32 agreement is to rounding, not to the bit, except where a case says so).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/cuda/host/host_go.hpp"
#include "support/gradcheck.hpp"

namespace loom::kernel_tests {

using loom::test::randn;  // seeded normal inputs

// max_i |a_i - b_i| / max(1e-6, max_i |b_i|); infinity when the sizes differ or a is NaN where b is
// not.
inline double distance(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double top = 1e-6, worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isinf(b[i]) || std::isnan(b[i])) {
      if (a[i] != b[i] && !std::isnan(b[i])) return INFINITY;
      continue;
    }
    top = std::max(top, std::fabs(static_cast<double>(b[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / top;
}

}  // namespace loom::kernel_tests
