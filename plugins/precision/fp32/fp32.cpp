// fp32: the reference numerics. GEMM operands stay fp32 and every layout is checked against it.
#include <loom/sdk.hpp>

namespace {

struct Fp32 : loom::sdk::PrecisionPlugin {
  static constexpr loom::sdk::About about{
      .name = "fp32",
      .version = "1.0.0",
      .summary = "fp32 operands, fp32 accumulation (the reference)",
      .compute_dtype = LOOM_F32,
      .exact = true};

  explicit Fp32(const loom::sdk::Context&) {}
};

}  // namespace

LOOM_PLUGIN(loom::sdk::precision_plugin<Fp32>())
