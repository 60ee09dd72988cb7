// The Llama pieces on their own: grouped-query attention against multi-head attention with
// repeated K/V and against finite differences, RoPE (with and without Llama 3.1 scaling) against
// its definition and finite differences, a whole Llama-shaped model's gradients, and the presets'
// parameter counts against the published figures.
#include <doctest/doctest.h>

#include <cmath>

#include "cli/job_config.hpp"
#include "config/config.hpp"
#include "config/section.hpp"
#include "gpt/gpt.hpp"
#include "ops/cpu/kernels.hpp"
#include "ops/ops.hpp"
#include "support/gradcheck.hpp"

using namespace loom;
using namespace loom::test;

namespace {

// q [rows, H*D], kv [rows, 2*Hkv*D] (k then v), as the model lays them out.
struct Gqa {
  int64_t B, T, H, Hkv, D;
  int64_t rows() const { return B * T; }
  std::vector<float> q, kv, out, lse;
  Gqa(int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t d) : B(b), T(t), H(h), Hkv(hkv), D(d) {
    q = randn(rows() * H * D, 31), kv = randn(rows() * 2 * Hkv * D, 32);
    out.resize(rows() * H * D), lse.resize(B * H * T);
  }
  void forward() {
    cpu::attention_gqa_fwd(out.data(), lse.data(), q.data(), kv.data(), kv.data() + Hkv * D, H * D,
                           2 * Hkv * D, B, T, H, Hkv, D);
  }
  void backward(const std::vector<float>& dout, std::vector<float>& dq, std::vector<float>& dkv) {
    dq.assign(q.size(), 0.f), dkv.assign(kv.size(), 0.f);
    cpu::attention_gqa_bwd(dq.data(), dkv.data(), dkv.data() + Hkv * D, dout.data(), q.data(),
                           kv.data(), kv.data() + Hkv * D, out.data(), lse.data(), H * D,
                           2 * Hkv * D, B, T, H, Hkv, D);
  }
  // The same attention as multi-head rows [q | k repeated | v repeated].
  std::vector<float> repeated_qkv() const {
    const int64_t C = H * D, per = H / Hkv;
    std::vector<float> qkv(rows() * 3 * C);
    for (int64_t r = 0; r < rows(); ++r)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t g = h / per;
          qkv[r * 3 * C + h * D + d] = q[r * C + h * D + d];
          qkv[r * 3 * C + C + h * D + d] = kv[r * 2 * Hkv * D + g * D + d];
          qkv[r * 3 * C + 2 * C + h * D + d] = kv[r * 2 * Hkv * D + Hkv * D + g * D + d];
        }
    return qkv;
  }
};

void check_against_repeated(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D) {
  INFO("B " << B << " T " << T << " H " << H << " Hkv " << Hkv << " D " << D);
  Gqa g(B, T, H, Hkv, D);
  g.forward();
  const int64_t C = H * D, per = H / Hkv;
  auto qkv = g.repeated_qkv();
  std::vector<float> ref(g.rows() * C), probs(B * H * T * T);
  cpu::attention_naive_fwd(ref.data(), probs.data(), qkv.data(), B, T, H, D);
  CHECK(max_abs_diff(g.out, ref) < 1e-5);
  // Backward: a shared head's dk and dv are the sums over its group's repeated copies.
  auto dout = randn(g.rows() * C, 33);
  std::vector<float> dq, dkv, dqkv(qkv.size());
  g.backward(dout, dq, dkv);
  cpu::attention_naive_bwd(dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, H, D);
  double worst = 0;
  for (int64_t r = 0; r < g.rows(); ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d)
        worst =
            std::max(worst, double(std::fabs(dq[r * C + h * D + d] - dqkv[r * 3 * C + h * D + d])));
  for (int64_t r = 0; r < g.rows(); ++r)
    for (int64_t kvh = 0; kvh < Hkv; ++kvh)
      for (int64_t d = 0; d < D; ++d) {
        double dk = 0, dv = 0;
        for (int64_t h = kvh * per; h < (kvh + 1) * per; ++h)
          dk += dqkv[r * 3 * C + C + h * D + d], dv += dqkv[r * 3 * C + 2 * C + h * D + d];
        worst = std::max(worst, std::fabs(dkv[r * 2 * Hkv * D + kvh * D + d] - dk));
        worst = std::max(worst, std::fabs(dkv[r * 2 * Hkv * D + Hkv * D + kvh * D + d] - dv));
      }
  CHECK(worst < 1e-4);
}

}  // namespace

TEST_CASE(
    "grouped-query attention equals multi-head attention on repeated K/V, forward and backward") {
  check_against_repeated(2, 8, 4, 2, 4);
  check_against_repeated(1, 100, 4, 1, 16);  // multi-query; ragged tiles
  check_against_repeated(2, 33, 6, 3, 8);
  check_against_repeated(1, 20, 3, 3, 8);  // Hkv = H: multi-head
}

TEST_CASE("grouped-query attention backward matches finite differences (q, k and v)") {
  Gqa g(1, 6, 4, 2, 3);
  auto r = randn(g.rows() * g.H * g.D, 34);
  auto loss = [&] {
    g.forward();
    return dot(g.out, r);
  };
  loss();
  std::vector<float> dq, dkv;
  g.backward(r, dq, dkv);
  CHECK(grad_error(g.q, dq, loss, 72) < kGradTolerance);
  CHECK(grad_error(g.kv, dkv, loss, 72) < kGradTolerance);
}

TEST_CASE("grouped-query attention backward is the same for 1 and 2 threads, to the bit") {
  Gqa g(2, 40, 8, 2, 8);
  g.forward();
  auto dout = randn(g.rows() * g.H * g.D, 35);
  std::vector<float> dq1, dkv1, dq2, dkv2;
  cpu::set_threads(1);
  g.backward(dout, dq1, dkv1);
  cpu::set_threads(2);
  g.backward(dout, dq2, dkv2);
  cpu::set_threads(0);
  CHECK(dq1 == dq2);
  CHECK(dkv1 == dkv2);
}

namespace {

model::Config rope_model(bool scaled) {
  model::Config c;
  c.n_head = 2, c.d_model = 16, c.seq_len = 12, c.positions = "rope", c.rope_theta = 10000;
  if (scaled) {
    c.rope_scaling.type = "llama3", c.rope_scaling.factor = 8,
    c.rope_scaling.original_max_position = 8;
  }
  return c;
}

}  // namespace

TEST_CASE("RoPE rotates channel i with channel i + D/2 by position x frequency (rotate_half)") {
  model::Config c = rope_model(false);
  gpt::RopeTables tab(c);
  const int64_t D = c.head_dim(), T = c.seq_len;
  std::vector<float> x(T * D, 0.f);
  for (int64_t t = 0; t < T; ++t) x[t * D + 1] = 1.f;  // e_1 at every position
  cpu::rope_fwd(x.data(), D, 1, T, 1, D, tab.cos.f32(), tab.sin.f32(), 0);
  const double inv1 = std::pow(10000.0, -2.0 / D);
  for (int64_t t = 0; t < T; ++t) {
    INFO("position " << t);
    CHECK(x[t * D + 1] == doctest::Approx(std::cos(t * inv1)).epsilon(1e-6));
    CHECK(x[t * D + 1 + D / 2] == doctest::Approx(std::sin(t * inv1)).epsilon(1e-6));
    CHECK(x[t * D + 0] == 0.f);
  }
  // Rotating forward then backward gives the input back.
  auto y = randn(2 * T * 3 * D, 36), keep = y;
  cpu::rope_fwd(y.data(), 3 * D, 2, T, 3, D, tab.cos.f32(), tab.sin.f32(), 0);
  cpu::rope_bwd(y.data(), 3 * D, 2, T, 3, D, tab.cos.f32(), tab.sin.f32(), 0);
  CHECK(max_abs_diff(y, keep) < 1e-6);
}

TEST_CASE("RoPE backward matches finite differences, plain and with Llama 3.1 scaling") {
  for (bool scaled : {false, true}) {
    INFO("scaled " << scaled);
    model::Config c = rope_model(scaled);
    gpt::RopeTables tab(c);
    const int64_t D = c.head_dim(), T = c.seq_len, heads = 2, ld = 3 * D;  // strided rows
    auto x = randn(T * ld, 37), r = randn(T * ld, 38);
    std::vector<float> y;
    auto loss = [&] {
      y = x;
      cpu::rope_fwd(y.data(), ld, 1, T, heads, D, tab.cos.f32(), tab.sin.f32(), 0);
      return dot(y, r);
    };
    std::vector<float> g = r;  // d loss / d y, then back through the rotation
    cpu::rope_bwd(g.data(), ld, 1, T, heads, D, tab.cos.f32(), tab.sin.f32(), 0);
    CHECK(grad_error(x, g, loss, 96) < kGradTolerance);
  }
}

TEST_CASE("Llama 3.1 frequency scaling keeps high frequencies, divides low ones, blends between") {
  model::Config c;
  c.n_head = 32, c.d_model = 4096, c.positions = "rope", c.rope_theta = 500000;
  auto plain = c.rope_inv_freq();
  c.rope_scaling.type = "llama3";  // factor 8, low 1, high 4, original 8192 (Llama 3.1)
  auto scaled = c.rope_inv_freq();
  REQUIRE(plain.size() == 64);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * M_PI / plain[i];
    if (wavelen < 8192.0 / 4) {
      CHECK(scaled[i] == plain[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      CHECK(scaled[i] == doctest::Approx(plain[i] / 8));
      ++divided;
    } else {
      CHECK(scaled[i] < plain[i]);
      CHECK(scaled[i] > plain[i] / 8);
      ++blended;
    }
  }
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(blended > 0);
}

TEST_CASE(
    "a Llama-shaped model's gradients match finite differences: RoPE, GQA, RMSNorm, SwiGLU, no "
    "bias") {
  model::Config c;
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.d_model = 16, c.d_ff = 24, c.vocab_size = 40,
  c.seq_len = 8;
  c.positions = "rope", c.norm = "rmsnorm", c.mlp = "swiglu", c.bias = false,
  c.tied_embeddings = false;
  c.norm_eps = 1e-6;
  LayerApi api(ops::cpu());
  ParamStore ps;
  const int64_t B = 2, T = 8;
  gpt::Gpt model(c, api, ps, B * T);
  ps.allocate(42);
  for (auto& p : ps.all())
    if (p.init.kind == Init::Normal) ops::cpu()->scale(p.value.f32(), 10.f, p.value.numel());
  std::vector<std::string> names;
  for (auto& p : ps.all()) names.push_back(p.name);
  CHECK(std::find(names.begin(), names.end(), "h0.attn.kv.w") != names.end());
  CHECK(std::find(names.begin(), names.end(), "wpe") == names.end());
  CHECK(std::find(names.begin(), names.end(), "h0.attn.proj.b") == names.end());
  std::mt19937 gen(7);
  std::vector<int32_t> tokens, targets;
  for (int64_t i = 0; i < B * T; ++i) tokens.push_back(gen() % 40), targets.push_back(gen() % 40);
  const float dl = 1.f / (B * T);
  ps.zero_grads();
  model.forward({tokens.data(), targets.data(), B, T, dl});
  model.backward({tokens.data(), targets.data(), B, T, dl});
  for (auto& p : ps.all()) {
    std::vector<float> x(p.value.f32(), p.value.f32() + p.value.numel());
    std::vector<float> g(p.grad.f32(), p.grad.f32() + p.grad.numel());
    auto loss = [&] {
      std::copy(x.begin(), x.end(), p.value.f32());
      return model.forward({tokens.data(), targets.data(), B, T, 0.f}) / (B * T);
    };
    double err = grad_error_l2(x, g, loss);
    std::copy(x.begin(), x.end(), p.value.f32());
    INFO("parameter " << p.name);
    CHECK(err < kModelGradTolerance);
  }
}

namespace {

model::Config preset(const std::string& name) {
  config::Config cfg = config::Config::parse("[model]\npreset = \"" + name + "\"\n", "t.toml");
  cfg.validate(loom::train::job_sections());
  return model::read_model(cfg.section("model"));
}

// Every parameter the model declares (global shapes), without allocating any of them.
int64_t declared(const model::Config& c) {
  LayerApi api(ops::cpu());
  ParamStore ps;
  gpt::Gpt model(c, api, ps, 1);
  int64_t n = 0;
  for (const auto& p : ps.all()) {
    int64_t e = 1;
    for (int64_t d : p.global_shape) e *= d;
    n += e;
  }
  return n;
}

}  // namespace

TEST_CASE("presets have the published parameter counts, to the parameter") {
  // Llama 3.1 8B: Meta's model card (8.03B) and the Hugging Face safetensors index (8,030,261,248).
  CHECK(preset("llama3-8b").params() == 8030261248LL);
  CHECK(preset("llama3-8b").d_ff == 14336);
  CHECK(preset("llama3-70b").params() == 70553706496LL);  // 70.6B
  CHECK(preset("llama3-70b").d_ff == 28672);
  CHECK(preset("llama3-405b").params() == 405853388800LL);  // 405B
  CHECK(preset("llama3-405b").d_ff == 53248);
  CHECK(preset("llama3-1b").params() == 1235814400LL);             // Llama 3.2 1B: 1.24B, tied
  CHECK(preset("llama3-3b").params() == 3212749824LL);             // Llama 3.2 3B: 3.21B, tied
  CHECK(preset("mixtral-8x7b").params() == 46702792704LL);         // 46.7B
  CHECK(preset("mixtral-8x7b").active_params() == 12879925248LL);  // 12.9B per token
  CHECK(preset("gpt2").params() == 124439808LL);  // GPT-2 124M (the Hugging Face gpt2 checkpoint)
  CHECK(preset("gpt2-medium").params() == 354823168LL);
  CHECK(preset("gpt2-large").params() == 774030080LL);
  CHECK(preset("gpt2-xl").params() == 1557611200LL);
  // The formula is the model: what the layers declare is the same count (these vocabularies
  // need no padding rows).
  for (const char* name : {"llama3-8b", "llama3-405b", "mixtral-8x7b", "llama-tiny"}) {
    INFO(name);
    CHECK(declared(preset(name)) == preset(name).params());
  }
}
