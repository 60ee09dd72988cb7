// Activations kept as the GEMM operands they become: where the precision slot makes real bf16
// copies, a block stores its norms' outputs and its MLP activation in bf16, cast once in
// forward. The same rounded values meet the same GEMMs as when each GEMM casts its operand, so
// the numbers are the same to the bit, in fewer bytes, and recomputation refills them too.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "config/config.hpp"
#include "gpt/gpt.hpp"
#include "loader/registry.hpp"
#include "loader/selection.hpp"
#include "ops/ops.hpp"
#include "precision/precision.hpp"

using namespace loom;
using namespace loom::gpt;

namespace {

// The CPU's table as a device that multiplies bf16 has it (where the CPU has no AMX its
// gemm_typed widens the operands: the values are the same).
loom_ops_v2 bf16_table() {
  loom_ops_v2 t = *ops::cpu();
  t.gemm_operand_dtypes |= 1u << LOOM_BF16;
  return t;
}

struct Trained {
  double loss = 0;
  std::vector<std::vector<float>> grads;
  int64_t peak_bytes = 0;  // tensors held at once from the model's construction on
};

// One forward and backward of a 2-block GPT with bf16 GEMM operands on `table`; `store_narrow`
// false casts each GEMM's operands where it runs.
Trained run_bf16(const loom_ops_v2& table, const std::string& recompute, bool store_narrow = true) {
  plugins::Registry reg{{{plugins::Registry::install_dir(), "install"}}};
  config::Config cfg = config::Config::parse("[plugins]\nprecision = \"bf16\"\n", "t.toml");
  const plugins::Selection sel = plugins::resolve(cfg, reg);
  const loom_options opts = plugins::options_for(cfg, "bf16");
  Precision prec(sel.slot("precision")->found, &opts, &table);
  REQUIRE(prec.bf16_gemms());
  model::Config c;
  c.n_layer = 2, c.n_head = 2, c.d_model = 32, c.d_ff = 128, c.vocab_size = 64, c.seq_len = 16;
  c.recompute = recompute;
  const int64_t B = 2, T = 16;
  mark_heap_tensor_peak();
  Trained out;
  {
    GemmNumerics numerics{&prec};
    numerics.store_narrow = store_narrow;
    LayerApi api(&table, numerics);
    ParamStore ps;
    Gpt model(c, api, ps, B * T);
    ps.allocate(5);
    std::mt19937 g(3);
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (int64_t i = 0; i < B * T; ++i)
      tokens[i] = static_cast<int32_t>(g() % 64), targets[i] = static_cast<int32_t>(g() % 64);
    const Microbatch mb{tokens.data(), targets.data(), B, T, 1.f / (B * T)};
    ps.zero_grads();
    out.loss = model.forward(mb) / (B * T);
    model.backward(mb);
    for (auto& p : ps.all()) out.grads.emplace_back(p.grad.f32(), p.grad.f32() + p.grad.numel());
  }
  out.peak_bytes = heap_tensor_peak_since_mark();
  return out;
}

}  // namespace

TEST_CASE(
    "bf16 GEMMs keep the norms' outputs and the MLP activation in 16 bits: the emulation's "
    "numbers in fewer bytes, and recomputation refills them bit for bit") {
  const loom_ops_v2 table = bf16_table();
  const Trained stored = run_bf16(table, "none"), cast = run_bf16(table, "none", false);
  CHECK(stored.loss == cast.loss);
  CHECK(stored.grads == cast.grads);
  // Per block, rows x (C + C + F) values that were 4 bytes are 2, and the bf16 copies each GEMM
  // made of them are gone.
  const int64_t rows = 2 * 16, slots = 2 * rows * (32 + 32 + 128) * 2;
  INFO("peak bytes: stored " << stored.peak_bytes << ", cast at each GEMM " << cast.peak_bytes);
  CHECK(cast.peak_bytes - stored.peak_bytes >= slots);
  for (const char* policy : {"selective", "full"}) {
    INFO("recompute = " << policy);
    const Trained again = run_bf16(table, policy);
    CHECK(again.loss == stored.loss);
    CHECK(again.grads == stored.grads);
  }
}
