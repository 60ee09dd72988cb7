// bench/train_step: one training step of the `small`-like config (L=6, d=384, h=6, T=256) on
// random tokens, as achieved GFLOP/s and as a fraction of the sgemm ceiling measured in the same
// run, on the same threads (absolute times on shared machines drift; the ratio does not).
//
//   bench_train_step [--threads N] [--batch B] [--steps S]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "gpt/gpt.hpp"
#include "ops/cpu/kernels.hpp"
#include "ops/ops.hpp"
#include "train/peak.hpp"

using namespace loom;

int main(int argc, char** argv) {
  int threads = 2, batch = 8, steps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (a == "--threads") threads = v;
    else if (a == "--batch") batch = v;
    else if (a == "--steps") steps = v;
  }
  gpt::GptConfig c;
  c.n_layer = 6, c.n_head = 6, c.d_model = 384, c.d_ff = 1536, c.vocab_size = 256, c.seq_len = 256;
  const int T = static_cast<int>(c.seq_len);

  double ceiling = train::measure_sgemm_gflops(threads, 1024, 5);
  cpu::set_threads(threads);
  const loom_ops* ops = ops::cpu();
  LayerApi api(ops);
  ParamStore ps;
  gpt::Gpt model(c, api, ps, batch * T);
  ps.allocate(1);
  std::vector<int32_t> tok(batch * T), tgt(batch * T);
  std::mt19937 g(3);
  for (int i = 0; i < batch * T; ++i) tok[i] = g() % 256, tgt[i] = g() % 256;
  gpt::Microbatch mb{tok.data(), tgt.data(), batch, T, 1.f / (batch * T)};

  double best = 1e30, total = 0;
  for (int s = 0; s <= steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    ps.zero_grads();
    model.forward(mb);
    model.backward(mb);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s == 0) continue;  // warm-up
    best = std::min(best, sec);
    total += sec;
  }
  double ceiling_after = train::measure_sgemm_gflops(threads, 1024, 5);
  double tokens = static_cast<double>(batch) * T;
  double flops = tokens * c.executed_flops_per_token();
  double achieved = flops / (total / steps) / 1e9;
  double ceil = std::max(ceiling, ceiling_after);
  std::printf("train_step L=%lld d=%lld h=%lld T=%d B=%d threads=%d\n", (long long)c.n_layer,
              (long long)c.d_model, (long long)c.n_head, T, batch, threads);
  std::printf("  step: mean %.1f ms, best %.1f ms, %.0f tokens/s\n", total / steps * 1e3,
              best * 1e3, tokens / (total / steps));
  std::printf("  FLOPs/token %.3g (6N + 12LHQT + LM head 6VC)\n", c.executed_flops_per_token());
  std::printf("  achieved %.1f GFLOP/s; sgemm ceiling %.1f GFLOP/s (before %.1f, after %.1f)\n",
              achieved, ceil, ceiling, ceiling_after);
  std::printf("  ratio achieved/ceiling: %.3f\n", achieved / ceil);
}
