// bench/train_step: one training step of a GPT-2-shaped model (L=6, d=384, h=6, T=256) and of a
// Llama-shaped one of the same width (RoPE, 6 query heads over 2 KV heads, RMSNorm, SwiGLU with
// Llama's d_ff rounding, no biases, untied head) on random tokens, as achieved GFLOP/s and as a
// fraction of the sgemm ceiling measured in the same run, on the same threads (absolute times on
// shared machines drift; the ratio does not). A third row is the Llama-shaped model with full
// activation recomputation: its step time over the plain one's (theory 4/3: one extra forward).
//
//   bench_train_step [--threads N] [--batch B] [--steps S]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>

#include "gpt/gpt.hpp"
#include "ops/cpu/kernels.hpp"
#include "ops/ops.hpp"
#include "train/peak.hpp"

using namespace loom;

namespace {

struct Row {
  double mean_s, best_s, flops_per_token;
};

Row time_steps(const model::Config& c, int batch, int steps) {
  const int T = static_cast<int>(c.seq_len);
  LayerApi api(ops::cpu());
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
  return {total / steps, best, c.executed_flops_per_token()};
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, batch = 8, steps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (a == "--threads")
      threads = v;
    else if (a == "--batch")
      batch = v;
    else if (a == "--steps")
      steps = v;
  }
  model::Config gpt2;
  gpt2.n_layer = 6, gpt2.n_head = 6, gpt2.d_model = 384, gpt2.d_ff = 1536, gpt2.vocab_size = 256,
  gpt2.seq_len = 256;
  model::Config llama = gpt2;
  llama.n_kv_head = 2, llama.positions = "rope", llama.norm = "rmsnorm", llama.mlp = "swiglu",
  llama.bias = false;
  llama.tied_embeddings = false;
  llama.d_ff = 1024;  // 2/3 of 4 d_model, a multiple of 256 (Llama's rounding)
  model::Config full = llama;
  full.recompute = "full";
  const int T = static_cast<int>(gpt2.seq_len);

  double ceiling = train::measure_sgemm_gflops(threads, 1024, 5);
  cpu::set_threads(threads);
  // Interleaved, so drift hits both shapes alike.
  Row g1 = time_steps(gpt2, batch, steps), l1 = time_steps(llama, batch, steps),
      f1 = time_steps(full, batch, steps);
  Row g2 = time_steps(gpt2, batch, steps), l2 = time_steps(llama, batch, steps),
      f2 = time_steps(full, batch, steps);
  double ceiling_after = train::measure_sgemm_gflops(threads, 1024, 5);
  const double ceil = std::max(ceiling, ceiling_after), tokens = static_cast<double>(batch) * T;
  std::printf(
      "train_step L=%lld d=%lld h=%lld T=%d B=%d threads=%d; sgemm ceiling %.1f GFLOP/s (before "
      "%.1f, after %.1f)\n",
      (long long)gpt2.n_layer, (long long)gpt2.d_model, (long long)gpt2.n_head, T, batch, threads,
      ceil, ceiling, ceiling_after);
  std::printf("  %-34s %9s %9s %11s %12s %9s\n", "model", "mean ms", "best ms", "tokens/s",
              "GFLOP/s", "/ceiling");
  double ratios[2];
  int k = 0;
  for (auto [name, a, b] : {std::tuple{"gpt2-shaped (gelu, layernorm)", g1, g2},
                            std::tuple{"llama-shaped (rope, gqa 6/2, swiglu)", l1, l2}}) {
    const double mean = std::min(a.mean_s, b.mean_s), best = std::min(a.best_s, b.best_s);
    const double achieved = tokens * a.flops_per_token / mean / 1e9;
    ratios[k++] = achieved / ceil;
    std::printf("  %-34s %9.1f %9.1f %11.0f %12.1f %9.3f\n", name, mean * 1e3, best * 1e3,
                tokens / mean, achieved, achieved / ceil);
  }
  std::printf("  FLOPs/token: 6N + 12LHQT + LM head 6VC (gpt2 %.3g, llama %.3g)\n",
              g1.flops_per_token, l1.flops_per_token);
  std::printf("  llama / gpt2 ratio to the ceiling: %.3f\n", ratios[1] / ratios[0]);
  const double plain = std::min(l1.mean_s, l2.mean_s), replay = std::min(f1.mean_s, f2.mean_s);
  std::printf(
      "  llama with recompute = full: mean %.1f ms; step time over recompute = none: %.3f (theory "
      "1.33)\n",
      replay * 1e3, replay / plain);
}
