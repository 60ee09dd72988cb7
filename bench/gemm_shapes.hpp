// What the GEMM benches share: one GPT block's GEMMs (and the LM head's), forward and backward,
// as cpu::gemm takes them; the best of 15 timed runs after 3 warm-ups; a numeric flag.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace loom::bench {

struct GemmShape {
  int ta, tb;  // C[M, N] = op(A)[M, K] op(B)[K, N], row-major
  int64_t M, N, K;
};

// y = x W^T (NT), dx = dy W (NN) and dW = dy^T x (TN) for each linear layer [out, in] of a block,
// and of the LM head [vocab, d] when vocab > 0.
inline std::vector<GemmShape> block_gemms(int64_t d, int64_t tokens, int64_t vocab) {
  std::vector<std::array<int64_t, 2>> layers = {{3 * d, d}, {d, d}, {4 * d, d}, {d, 4 * d}};
  if (vocab > 0) layers.push_back({vocab, d});
  std::vector<GemmShape> shapes;
  for (const auto& l : layers) {
    shapes.push_back({0, 1, tokens, l[0], l[1]});
    shapes.push_back({0, 0, tokens, l[1], l[0]});
    shapes.push_back({1, 0, l[0], l[1], tokens});
  }
  return shapes;
}

template <class F>
double best_seconds(F&& f) {
  for (int i = 0; i < 3; ++i) f();
  double best = 1e30;
  for (int i = 0; i < 15; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// `--name N` among the arguments, or `fallback`.
inline int64_t flag(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

}  // namespace loom::bench
