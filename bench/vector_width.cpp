// The element-wise kernels' vector width: GELU's forward and backward on bf16 storage (the MLP's
// at L6 d384 T256 B8: 6 x 2048 x 1536 values) with ops/cpu/activations.cpp compiled once per
// width by bench/vector_width.sh. Prints milliseconds per call, the median of 10.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ops/cpu/kernels.hpp"

int main() {
  const int64_t n = int64_t{6} * 2048 * 1536;
  std::vector<uint16_t> fc(n), out(n);
  std::vector<float> dout(n);
  for (int64_t i = 0; i < n; ++i) {
    fc[i] = static_cast<uint16_t>(0x3e00 + i % 512);  // bf16 values from 0.125 to about 4
    dout[i] = 0.001f * static_cast<float>(i % 997);
  }
  auto median_ms = [](auto&& f) {
    f();  // warm: pages touched, threads started
    std::vector<double> ms;
    for (int r = 0; r < 10; ++r) {
      const auto a = std::chrono::steady_clock::now();
      f();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[5];
  };
  const loom_ref y{out.data(), LOOM_BF16, 0};
  const loom_cref x{fc.data(), LOOM_BF16, 0}, dy{dout.data(), LOOM_F32, 0};
  const double fwd = median_ms([&] { loom::cpu::gelu_fwd(y, x, n); });
  const double bwd = median_ms([&] { loom::cpu::gelu_bwd(y, x, dy, n); });
  std::printf("%.2f %.2f\n", fwd, bwd);
}
