// tf32: GEMM operands rounded to TensorFloat-32 (8 exponent bits, 10 mantissa bits), the format
// Ampere and Hopper tensor cores use for "fp32" matmuls. Running a config with this plugin on the
// CPU shows how much a model's loss moves when its GEMMs lose 13 bits of mantissa.
//
// Built against the installed SDK alone: it includes nothing but <loom/sdk.hpp>.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <loom/sdk.hpp>
#include <string>

namespace {

// Rounds an fp32 value to `bits` mantissa bits, round-to-nearest-even on the dropped bits.
// NaN and infinity pass through; a value that rounds past the largest finite becomes infinity,
// as the hardware does.
float round_mantissa(float x, int bits) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf or NaN
  int drop = 23 - bits;
  uint32_t half = 1u << (drop - 1);
  uint32_t lsb = (u >> drop) & 1u;
  u += half - 1 + lsb;
  u &= ~((1u << drop) - 1);
  std::memcpy(&x, &u, 4);
  return x;
}

struct Tf32 : loom::sdk::RoundingPrecision {
  static constexpr loom_option_spec kOptions[] = {
      {"mantissa_bits", LOOM_OPT_INT, "10", "mantissa bits kept in each operand (1..22)"},
      {"round_gradients", LOOM_OPT_BOOL, "true", "also round gradient operands in backward"},
      {nullptr, 0, nullptr, nullptr},
  };
  // Checked by the runtime before create(), and by `loom config check`.
  static constexpr loom_option_rule kRules[] = {
      {"mantissa_bits", 1, 22, nullptr, 0},
      {nullptr, 0, 0, nullptr, 0},
  };
  static constexpr loom::sdk::About about{
      .name = "tf32",
      .version = "1.0.0",
      .summary = "GEMM operands rounded to TensorFloat-32 (example plugin)",
      .options = kOptions,
      .option_rules = kRules,
      .compute_dtype = LOOM_F32};

  explicit Tf32(const loom::sdk::Context& ctx)
      : bits_(static_cast<int>(ctx.options.i64("mantissa_bits"))),
        round_gradients_(ctx.options.boolean("round_gradients")) {
    ctx.host.info("keeping " + std::to_string(bits_) + " mantissa bits");
  }

  void round_operand(loom_tensor& t, loom_operand_role role) override {
    if (t.dtype != LOOM_F32) throw loom::sdk::Error(LOOM_INTERNAL, "tf32 rounds fp32 tensors only");
    if (role == LOOM_OPERAND_GRADIENT && !round_gradients_) return;
    int64_t n = 1;
    for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
    float* x = static_cast<float*>(t.data);
    for (int64_t i = 0; i < n; ++i) x[i] = round_mantissa(x[i], bits_);
  }

 private:
  int bits_;
  bool round_gradients_;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::precision_plugin<Tf32>())
