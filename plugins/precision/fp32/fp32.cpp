// fp32: the reference numerics. GEMM operands stay fp32 and every layout is checked against it.
#include <loom/sdk.hpp>

namespace {

struct Fp32 : loom::sdk::PrecisionPlugin {
  static constexpr const char* name = "fp32";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* summary = "fp32 operands, fp32 accumulation (the reference)";
  static constexpr loom_dtype compute_dtype = LOOM_F32;
  static constexpr bool exact = true;

  explicit Fp32(const loom::sdk::Context&) {}
  void round_operand(loom_tensor&, loom_operand_role) override {}
};

}  // namespace

LOOM_PLUGIN(loom::sdk::precision_plugin<Fp32>())
