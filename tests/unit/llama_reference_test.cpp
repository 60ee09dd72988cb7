// Loom's Llama against PyTorch: the same weights and tokens through a float64 PyTorch Llama
// written from the Hugging Face semantics (tests/reference/llama_reference.py), comparing the
// loss and every parameter's gradient.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "gpt/gpt.hpp"
#include "ops/ops.hpp"
#include "support/process.hpp"

using namespace loom;
using namespace loom::test;

namespace {

template <class T>
void dump(const std::filesystem::path& p, const T* data, size_t n) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(data), n * sizeof(T));
}

}  // namespace

TEST_CASE("a Llama-shaped model's loss and gradients match PyTorch (float64) on the same weights") {
  model::Config c;
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.d_model = 32, c.vocab_size = 64, c.seq_len = 24;
  c.d_ff = 48, c.positions = "rope", c.rope_theta = 500000, c.norm = "rmsnorm", c.norm_eps = 1e-5;
  c.mlp = "swiglu", c.bias = false, c.tied_embeddings = false;
  // Llama 3.1 scaling over a context of 8, so training at T = 24 exercises all three bands.
  c.rope_scaling.type = "llama3", c.rope_scaling.factor = 4,
  c.rope_scaling.original_max_position = 8;
  const int64_t B = 2, T = c.seq_len;
  LayerApi api(ops::cpu());
  ParamStore ps;
  gpt::Gpt model(c, api, ps, B * T);
  ps.allocate(5);
  // Weights large enough that every term moves the loss well above fp32 noise.
  for (auto& p : ps.all())
    if (p.init.kind == Init::Normal) ops::cpu()->scale(p.value.f32(), 5.f, p.value.numel());
  std::mt19937 g(11);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i)
    tokens[i] = g() % c.vocab_size, targets[i] = g() % c.vocab_size;
  const float dl = 1.f / (B * T);
  ps.zero_grads();
  const double loss = model.forward({tokens.data(), targets.data(), B, T, dl}) / (B * T);
  model.backward({tokens.data(), targets.data(), B, T, dl});

  TempDir t;
  std::ostringstream js;
  js.precision(17);
  js << "{\"n_layer\": " << c.n_layer << ", \"n_head\": " << c.n_head
     << ", \"n_kv_head\": " << c.kv_heads() << ", \"head_dim\": " << c.head_dim()
     << ", \"d_model\": " << c.d_model << ", \"vocab_size\": " << c.vocab_size
     << ", \"rope_theta\": " << c.rope_theta << ", \"norm_eps\": " << c.norm_eps
     << ", \"rope_scaling\": {\"factor\": " << c.rope_scaling.factor
     << ", \"low_freq_factor\": " << c.rope_scaling.low_freq_factor
     << ", \"high_freq_factor\": " << c.rope_scaling.high_freq_factor
     << ", \"original_max_position\": " << c.rope_scaling.original_max_position << "}, \"B\": " << B
     << ", \"T\": " << T << ", \"loss\": " << loss << ", \"params\": {";
  bool first = true;
  for (const auto& p : ps.all()) {
    js << (first ? "" : ", ") << "\"" << p.name << "\": [" << p.offset << ", [";
    for (size_t d = 0; d < p.global_shape.size(); ++d) js << (d ? ", " : "") << p.global_shape[d];
    js << "]]";
    first = false;
  }
  js << "}}";
  t.write("model.json", js.str());
  dump(t.path / "params.f32", ps.values(), ps.numel());
  dump(t.path / "grads.f32", ps.grads(), ps.numel());
  dump(t.path / "tokens.i32", tokens.data(), tokens.size());
  dump(t.path / "targets.i32", targets.data(), targets.size());
  // Debian's python3 carries python3-torch (scripts/install-deps.sh).
  auto r = sh("/usr/bin/python3 " LOOM_SOURCE_DIR "/tests/reference/llama_reference.py " +
              t.path.string());
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(r.out.find("agree") != std::string::npos);
}
