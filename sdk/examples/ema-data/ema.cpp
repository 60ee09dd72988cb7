// A data plugin with training state of its own, as error feedback or local SGD have: each step's
// averaged gradient is blended into a running average, and the average is what AdamW sees
//   ema = 0.5 ema + 0.5 mean_dp(g);   g = ema.
// Resuming without `ema` would change every later step, so a bitwise resume shows that the
// runtime saved and restored it (the Stateful save_state/load_state). It declares no capabilities,
// so it also shows that ep > 1 and pp > 1 are refused for a plugin that did not declare them.
#include <cstring>
#include <loom/sdk.hpp>
#include <vector>

namespace {

class Ema : public loom::sdk::ReplicatedDataPlugin, public loom::sdk::Stateful {
 public:
  // For loom plan: one blocking all-reduce of every gradient after the backward.
  static std::vector<loom_cost_collective> cost(const loom_cost_query& q,
                                                const loom::sdk::Options&) {
    return {loom::sdk::collective(LOOM_COST_ALL_REDUCE, LOOM_COST_STEP, q.params * q.grad_bytes, 1,
                                  0.0, "ema: gradient all-reduce, then average")};
  }
  static constexpr loom::sdk::About about{
      .name = "ema",
      .version = "0.0.1",
      .summary = "data parallel with a running average of the gradients (state in checkpoints)",
      .cost = &cost};

  explicit Ema(const loom::sdk::Context& ctx) : host_(ctx.host.raw()) {}

  void setup(const loom_data_context& c) override {
    ctx_ = c;
    ema_.assign(static_cast<size_t>(c.numel), 0.f);
  }
  void grad_ready(int64_t) override {}
  void finish_grads(double& comm_ms, double& exposed_comm_ms) override {
    loom_tensor t = loom::sdk::flat_tensor(ctx_.grads, LOOM_F32, ctx_.numel);
    loom::sdk::ErrorBox e(host_);
    if (ctx_.comm->all_reduce(ctx_.comm_self, ctx_.dp, &t, LOOM_REDUCE_AVG, nullptr, e.get()) !=
        LOOM_OK)
      e.raise("ema: all_reduce");
    for (int64_t i = 0; i < ctx_.numel; ++i)
      ctx_.grads[i] = ema_[i] = 0.5f * ema_[i] + 0.5f * ctx_.grads[i];
    comm_ms = exposed_comm_ms = 0;
  }
  std::string save_state() override {
    return std::string(reinterpret_cast<const char*>(ema_.data()), ema_.size() * sizeof(float));
  }
  void load_state(const std::string& bytes) override {
    if (bytes.size() != ema_.size() * sizeof(float))
      throw loom::sdk::Error(LOOM_FATAL, "ema: saved state has " + std::to_string(bytes.size()) +
                                             " bytes, expected " +
                                             std::to_string(ema_.size() * sizeof(float)));
    std::memcpy(ema_.data(), bytes.data(), bytes.size());
  }

 private:
  const loom_host* host_;
  loom_data_context ctx_{};
  std::vector<float> ema_;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::data_plugin<Ema>())
