// bf16: every GEMM operand (weights, activations, gradients) cast to bfloat16, accumulation in
// fp32; master weights, gradients and AdamW moments stay fp32. bf16 has fp32's exponent range, so
// no loss scaling is needed: this is the usual mixed precision of Megatron and torchtitan.
#include <loom/sdk.hpp>

namespace {

struct Bf16 : loom::sdk::PrecisionPlugin {
  static constexpr loom::sdk::About about{
      .name = "bf16",
      .version = "1.0.0",
      .summary = "bf16 GEMM operands, fp32 accumulation and master weights",
      .compute_dtype = LOOM_BF16};

  explicit Bf16(const loom::sdk::Context&) {}
  int32_t add_site(const std::string&, loom_operand_role) override { return sites_++; }
  loom_operand_format site_format(int32_t) override { return {LOOM_BF16, 1.f}; }

 private:
  int32_t sites_ = 0;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::precision_plugin<Bf16>())
