// bench/cpu_profile: one fp32 training step of a GPT-2-shaped model on the CPU (forward,
// backward, the gradient norm, AdamW over every parameter), with every op-table call timed into
// its op family (op_profile.hpp). Prints the mean step time and each family's milliseconds per
// step as `key value` lines for bench/cpu_profile.sh, which runs PyTorch eager on the same shape
// and sets the two side by side. "framework" is the step's time outside every op call: the
// layers' glue, allocation, and the host loops between kernels.
//
//   bench_cpu_profile --layers L --d D --heads H --T T --batch B --vocab V --threads N --steps S
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gpt/gpt.hpp"
#include "op_profile.hpp"
#include "ops/cpu/kernels.hpp"
#include "ops/ops.hpp"

using namespace loom;

namespace {

struct Args {
  int layers = 4, d = 128, heads = 4, T = 128, batch = 16, vocab = 256, threads = 2, steps = 10;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--layers")
      a.layers = v;
    else if (k == "--d")
      a.d = v;
    else if (k == "--heads")
      a.heads = v;
    else if (k == "--T")
      a.T = v;
    else if (k == "--batch")
      a.batch = v;
    else if (k == "--vocab")
      a.vocab = v;
    else if (k == "--threads")
      a.threads = v;
    else if (k == "--steps")
      a.steps = v;
    else {
      std::fprintf(stderr, "bench_cpu_profile: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

// AdamW's moments and the pointer lists adamw_multi and sum_squares_multi take, per parameter.
struct Update {
  std::vector<float*> value, grad, m, v;
  std::vector<const float*> grad_in;
  std::vector<int64_t> numel;
  std::vector<float> decay;
  std::vector<std::vector<float>> moments;
  explicit Update(ParamStore& ps) {
    for (Param& p : ps.all()) {
      const int64_t n = p.value.numel();
      moments.emplace_back(n, 0.f), moments.emplace_back(n, 0.f);
      value.push_back(p.value.f32()), grad.push_back(p.grad.f32()), grad_in.push_back(p.grad.f32());
      m.push_back(moments[moments.size() - 2].data()), v.push_back(moments.back().data());
      numel.push_back(n), decay.push_back(0.1f);
    }
  }
  void step(const loom_ops_v2* o, int64_t t) {
    const int64_t count = static_cast<int64_t>(value.size());
    std::vector<double> norms(count);
    o->sum_squares_multi(count, grad_in.data(), numel.data(), norms.data());
    o->adamw_multi(count, value.data(), grad.data(), m.data(), v.data(), numel.data(), decay.data(),
                   1e-4f, 0.9f, 0.95f, 1e-8f, t);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  model::Config c;  // GPT-2: learned positions, LayerNorm, tanh GELU, biases, tied head
  c.n_layer = a.layers, c.n_head = a.heads, c.d_model = a.d, c.d_ff = 4 * a.d,
  c.vocab_size = a.vocab, c.seq_len = a.T;
  cpu::set_threads(a.threads);
  const loom_ops_v2 timed = bench::profiled(ops::cpu());
  LayerApi api(&timed);
  ParamStore ps;
  gpt::Gpt model(c, api, ps, static_cast<int64_t>(a.batch) * a.T);
  ps.allocate(1);
  Update update(ps);
  std::vector<int32_t> tok(a.batch * a.T), tgt(a.batch * a.T);
  std::mt19937 g(3);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = g() % a.vocab, tgt[i] = g() % a.vocab;
  model::Microbatch mb{tok.data(), tgt.data(), a.batch, a.T,
                       1.f / static_cast<float>(a.batch * a.T)};
  double total = 0, best = 1e30;
  for (int s = 0; s <= a.steps; ++s) {
    if (s == 1) bench::op_profile().clear();  // step 0 warms up
    const auto t0 = std::chrono::steady_clock::now();
    ps.zero_grads();
    model.forward(mb);
    model.backward(mb);
    update.step(&timed, s + 1);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s == 0) continue;
    total += sec, best = std::min(best, sec);
  }
  const double mean_ms = total / a.steps * 1e3;
  std::printf("step_ms %.3f\nbest_ms %.3f\n", mean_ms, best * 1e3);
  double in_ops = 0;
  for (int f = 0; f < bench::kFamilies; ++f) {
    const double ms = bench::op_profile().seconds[f] / a.steps * 1e3;
    in_ops += ms;
    std::printf("%s %.3f\n", bench::family_name(f), ms);
  }
  std::printf("framework %.3f\n", mean_ms - in_ops);
}
