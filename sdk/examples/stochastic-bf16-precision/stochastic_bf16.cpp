// bf16 with stochastic rounding (Gupta et al. 2015, "Deep learning with limited numerical
// precision"): each GEMM operand element is rounded to one of its two bf16 neighbours, up with
// probability equal to its distance from the lower one, so the rounding is unbiased on average:
//   r = hash(seed, step, micro-batch, site, i) mod 2^16;   bits(x') = (bits(x) + r) & ~0xffff
// The random bits are a counter hash of [run] seed and where the run is (the loom.step service:
// the step, the micro-batch, training or evaluation) and of the operand's site, so a resumed run
// draws what the uninterrupted one drew, and two sites never share a stream. Host memory only:
// the rounding runs on the CPU's tensors.
#include <cstdint>
#include <cstring>
#include <loom/sdk.hpp>

namespace {

// splitmix64's finaliser: a bijection of 64-bit counters that passes BigCrush as a generator.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class StochasticBf16 : public loom::sdk::RoundingPrecision {
 public:
  static int score(const loom::sdk::Host& host, std::string& why_not) {
    const auto* device = host.service<loom_ops>(LOOM_SERVICE_DEVICE);
    if (!device || device->host_reachable) return 1;
    why_not = "it rounds operands in host memory, and this device's memory is not";
    return 0;
  }
  static constexpr loom::sdk::About about{
      .name = "sr_bf16",
      .version = "1.0.0",
      .summary = "bf16 GEMM operands with stochastic rounding (example plugin)",
      .score = &score,
      .services = LOOM_SERVICE_STEP "|" LOOM_SERVICE_DEVICE,
      .compute_dtype = LOOM_F32};  // its GEMMs multiply the rounded values in fp32

  explicit StochasticBf16(const loom::sdk::Context& ctx) : host_(ctx.host) {}

  void round_at_site(loom_tensor& t, loom_operand_role, int32_t site) override {
    if (t.dtype != LOOM_F32) throw loom::sdk::Error(LOOM_INTERNAL, "sr_bf16 rounds fp32 tensors");
    const loom_step_info* s = host_.step();
    const uint64_t stream =
        mix(mix(mix((s ? s->seed : 0) ^ 0x5352424631360000ull) ^ uint64_t(s ? s->step : 0)) ^
            (uint64_t(uint32_t(s ? s->micro_batch : -1)) << 32 | uint64_t(uint32_t(site)) << 1 |
             uint64_t(s && s->training)));
    float* x = static_cast<float*>(t.data);
    const int64_t n = loom::sdk::numel(t);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &x[i], 4);
      if ((u & 0x7f800000u) == 0x7f800000u) continue;  // inf and NaN pass
      u = (u + static_cast<uint32_t>(mix(stream + uint64_t(i)) & 0xffffu)) & 0xffff0000u;
      std::memcpy(&x[i], &u, 4);
    }
  }

 private:
  loom::sdk::Host host_;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::precision_plugin<StochasticBf16>())
