// bench/attention: the tiled online-softmax attention against the naive one that stores the
// T x T probabilities, forward + backward, at T = 256, 1024, 4096 (B = 1, H = 6, D = 64); then
// grouped-query attention (6 query heads over 2 key/value heads) tiled, against the naive one on
// K/V repeated to 6 heads (what a framework without a GQA kernel does). Prints time, the memory
// each needs beyond its inputs and outputs (counted from its buffers, and the rise in peak RSS
// measured around it), and the ratios.
//
//   bench_attention [--threads N] [--max-t T]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "train/metrics.hpp"

using namespace loom;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The tiled kernel's floats per thread beyond lse (H T): backward's tiles of S and dP (64 query
// rows by 256 keys each, runtime/ops/cpu/attention.cpp) and the row terms delta (T); forward's
// tile of S, accumulator and row statistics are fewer. Q, K, V and dO are read in place.
double tiled_thread_floats(int64_t T) { return 2.0 * 64 * 256 + T; }

struct Result {
  double seconds;
  double extra_bytes;      // working memory the algorithm allocates
  double peak_rise_bytes;  // measured VmHWM rise while it ran
};

Result run(bool tiled, int64_t T, int64_t H, int64_t D, int threads, const std::vector<float>& qkv,
           const std::vector<float>& dout) {
  const int64_t C = H * D;
  int64_t before = train::process_memory().peak_bytes;
  double t0 = now_s();
  std::vector<float> out(T * C), dqkv(T * 3 * C);
  double extra;
  if (tiled) {
    std::vector<float> lse(H * T);
    cpu::attention_fwd(out.data(), lse.data(), qkv.data(), 1, T, H, D);
    cpu::attention_bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), 1, T, H, D);
    extra = 4.0 * (H * T + threads * tiled_thread_floats(T));
  } else {
    std::vector<float> probs(H * T * T);
    cpu::attention_naive_fwd(out.data(), probs.data(), qkv.data(), 1, T, H, D);
    cpu::attention_naive_bwd(dqkv.data(), dout.data(), qkv.data(), probs.data(), 1, T, H, D);
    extra = 4.0 * H * T * T;
  }
  double sec = now_s() - t0;
  int64_t after = train::process_memory().peak_bytes;
  return {sec, extra, static_cast<double>(after - before)};
}

// Grouped-query: q [T, H*D], kv [T, 2*Hkv*D]. Tiled reads the shared heads in place; naive
// first repeats K and V to H heads (2 T H D floats) and then stores the T x T probabilities.
Result run_gqa(bool tiled, int64_t T, int64_t H, int64_t Hkv, int64_t D, int threads,
               const std::vector<float>& q, const std::vector<float>& kv,
               const std::vector<float>& dout) {
  const int64_t C = H * D, per = H / Hkv;
  int64_t before = train::process_memory().peak_bytes;
  double t0 = now_s();
  std::vector<float> out(T * C);
  double extra;
  if (tiled) {
    std::vector<float> lse(H * T), dq(T * C), dkv(T * 2 * Hkv * D);
    cpu::attention_gqa_fwd(out.data(), lse.data(), q.data(), kv.data(), kv.data() + Hkv * D, C,
                           2 * Hkv * D, 1, T, H, Hkv, D);
    cpu::attention_gqa_bwd(dq.data(), dkv.data(), dkv.data() + Hkv * D, dout.data(), q.data(),
                           kv.data(), kv.data() + Hkv * D, out.data(), lse.data(), C, 2 * Hkv * D,
                           1, T, H, Hkv, D);
    // As above, plus each head's dk and dv share (2 T D per head) summed over its group.
    extra = 4.0 * (H * T + 2.0 * H * T * D + threads * tiled_thread_floats(T));
  } else {
    std::vector<float> qkv(T * 3 * C), dqkv(T * 3 * C), probs(H * T * T);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          qkv[t * 3 * C + h * D + d] = q[t * C + h * D + d];
          qkv[t * 3 * C + C + h * D + d] = kv[t * 2 * Hkv * D + (h / per) * D + d];
          qkv[t * 3 * C + 2 * C + h * D + d] = kv[t * 2 * Hkv * D + Hkv * D + (h / per) * D + d];
        }
    cpu::attention_naive_fwd(out.data(), probs.data(), qkv.data(), 1, T, H, D);
    cpu::attention_naive_bwd(dqkv.data(), dout.data(), qkv.data(), probs.data(), 1, T, H, D);
    extra = 4.0 * (H * T * T + 2.0 * T * C);
  }
  double sec = now_s() - t0;
  int64_t after = train::process_memory().peak_bytes;
  return {sec, extra, static_cast<double>(after - before)};
}

void print_row(int64_t T, const Result& a, const Result& b) {
  std::printf("%6lld | %10.1f %10.1f %6.2fx | %12.2f %12.2f %8.0fx | %.1f / %.1f\n", (long long)T,
              a.seconds * 1e3, b.seconds * 1e3, b.seconds / a.seconds, a.extra_bytes / 1048576,
              b.extra_bytes / 1048576, b.extra_bytes / a.extra_bytes, a.peak_rise_bytes / 1048576,
              b.peak_rise_bytes / 1048576);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int64_t max_t = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--max-t")) max_t = std::atoll(argv[i + 1]);
  }
  cpu::set_threads(threads);
  const int64_t H = 6, D = 64, C = H * D;
  std::printf("attention fwd+bwd, B=1 H=%lld D=%lld, %d threads\n", (long long)H, (long long)D,
              threads);
  std::printf("%6s | %10s %10s %7s | %12s %12s %9s | %s\n", "T", "tiled ms", "naive ms", "speedup",
              "tiled MiB", "naive MiB", "mem ratio", "peak RSS rise tiled / naive (MiB)");
  {  // Warm-up, untimed: oneDNN generates its GEMM kernels on first use (code, and RSS).
    const int64_t T = 256;
    std::vector<float> qkv(T * 3 * C, 0.1f), dout(T * C, 0.1f);
    run(true, T, H, D, threads, qkv, dout);
  }
  for (int64_t T : {256, 1024, 4096}) {
    if (T > max_t) break;
    std::mt19937 g(1);
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<float> qkv(T * 3 * C), dout(T * C);
    for (auto& x : qkv) x = n(g);
    for (auto& x : dout) x = n(g);
    // Tiled first: the peak-RSS rise of the naive run then measures its own T x T buffer.
    Result a = run(true, T, H, D, threads, qkv, dout);
    Result b = run(false, T, H, D, threads, qkv, dout);
    print_row(T, a, b);
  }
  const int64_t Hkv = 2;
  std::printf(
      "\ngrouped-query attention fwd+bwd, B=1 H=%lld Hkv=%lld D=%lld: tiled GQA vs naive on "
      "repeated K/V\n",
      (long long)H, (long long)Hkv, (long long)D);
  for (int64_t T : {256, 1024, 4096}) {
    if (T > max_t) break;
    std::mt19937 g(2);
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<float> q(T * C), kv(T * 2 * Hkv * D), dout(T * C);
    for (auto* v : {&q, &kv, &dout})
      for (auto& x : *v) x = n(g);
    Result a = run_gqa(true, T, H, Hkv, D, threads, q, kv, dout);
    Result b = run_gqa(false, T, H, Hkv, D, threads, q, kv, dout);
    print_row(T, a, b);
  }
}
