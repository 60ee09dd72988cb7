// sp: Megatron sequence parallelism (Korthikanti et al. 2022) on top of tp. Outside the tensor-
// parallel regions (norms, residual adds, biases after a row-parallel layer) each tp rank keeps
// only its block of rows, cutting those activations by the tp degree. f becomes an all-gather
// of the rows (backward: reduce-scatter) and g a reduce-scatter (backward: all-gather), the same
// bytes as tp's all-reduces. Replicated parameters then see only their rank's rows, so their
// gradients are summed over tp.
#include <loom/sdk.hpp>

namespace {

using loom::sdk::ErrorBox;

class Sp : public loom::sdk::SequencePlugin {
 public:
  // Korthikanti et al. 2022: each of tp's all-reduces becomes an all-gather before the region
  // and a reduce-scatter after it, the same bytes on the wire (REFERENCE.md).
  static std::vector<loom_cost_collective> cost(const loom_cost_query& q,
                                                const loom::sdk::Options&) {
    using loom::sdk::collective;
    const int64_t act = q.tokens * q.d_model * q.act_bytes,
                  calls = 2 * int64_t(q.layers) * q.microbatches;
    return {collective(LOOM_COST_ALL_GATHER, LOOM_COST_FORWARD, act, calls, 0.0,
                       "block input all-gather"),
            collective(LOOM_COST_REDUCE_SCATTER, LOOM_COST_FORWARD, act, calls, 0.0,
                       "block output reduce-scatter"),
            collective(LOOM_COST_ALL_GATHER, LOOM_COST_BACKWARD, act, calls, 0.0,
                       "block grad all-gather"),
            collective(LOOM_COST_REDUCE_SCATTER, LOOM_COST_BACKWARD, act, calls, 0.0,
                       "block grad reduce-scatter")};
  }
  static constexpr loom::sdk::About about{
      .name = "sp",
      .version = "1.0.0",
      .summary = "sequence parallel: rows split over tp outside the tp regions",
      .cost = &cost};

  explicit Sp(const loom::sdk::Context& ctx) : host_(ctx.host) {}

  void setup(const loom_tensor_context& ctx) override { ctx_ = ctx; }

  void gather(const loom_tensor& local, loom_tensor& full) override {
    ErrorBox e(host_.raw());
    if (ctx_.comm->all_gather(ctx_.comm_self, ctx_.tp, &local, &full, nullptr, e.get()) != LOOM_OK)
      e.raise("sp all-gather");
  }

  void scatter(const loom_tensor& full, loom_tensor& local) override {
    ErrorBox e(host_.raw());
    if (ctx_.comm->reduce_scatter(ctx_.comm_self, ctx_.tp, &full, &local, LOOM_REDUCE_SUM, nullptr,
                                  e.get()) != LOOM_OK)
      e.raise("sp reduce-scatter");
  }

  void reduce_replicated(loom_tensor& grad) override {
    ErrorBox e(host_.raw());
    if (ctx_.comm->all_reduce(ctx_.comm_self, ctx_.tp, &grad, LOOM_REDUCE_SUM, nullptr, e.get()) !=
        LOOM_OK)
      e.raise("sp replicated-gradient all-reduce");
  }

 private:
  loom::sdk::Host host_;
  loom_tensor_context ctx_{};
};

}  // namespace

LOOM_PLUGIN(loom::sdk::sequence_plugin<Sp>())
