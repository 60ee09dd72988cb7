// Local SGD (Stich 2019, "Local SGD converges fast and communicates little"; Lin et al. 2020):
// each replica steps on its own gradients, and every k steps the replicas average their
// parameters and AdamW's moments, so they start the next period from one model and one state:
//   every step:       x_r <- AdamW(x_r, g_r)                 (no gradient all-reduce)
//   step % k == 0:    x_r <- mean_dp(x),  m_r <- mean_dp(m),  v_r <- mean_dp(v)
// It sends a model and two moments every k steps, against ddp's gradients every step. Built on
// ABI 3's data hooks: after_update runs the average, and LOOM_DATA_DIVERGES with replicas_synced
// tells the runtime to compare the replicas at sync steps only. Its validate hook reads other
// sections through loom.config, so a run that would end or save between syncs is refused before
// it starts (a save on a signal may still fall between: the resumed run restarts every replica
// from dp rank 0's).
#include <loom/sdk.hpp>
#include <string>
#include <vector>

namespace {

class LocalSgd : public loom::sdk::ReplicatedDataPlugin {
 public:
  static constexpr loom_option_spec kOptions[] = {
      {"k", LOOM_OPT_INT, "4", "steps between two averages of the replicas"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom_option_rule kRules[] = {{"k", 1, 1e9, nullptr, 0},
                                                {nullptr, 0, 0, nullptr, 0}};
  // Every k steps, an all-reduce of the parameters and of both moments, after the update.
  static std::vector<loom_cost_collective> cost(const loom_cost_query& q,
                                                const loom::sdk::Options& o) {
    loom_cost_collective c = loom::sdk::collective(LOOM_COST_ALL_REDUCE, LOOM_COST_STEP,
                                                   q.params * 4, 3, 0.0, "local_sgd: average");
    c.every = static_cast<int32_t>(o.i64("k"));
    return {c};
  }
  // A run must end, and save, on an average: a checkpoint holds one replica (dp rank 0's), so
  // one taken between two would resume every replica from it. cp ranks share each sequence, so
  // their model must be one.
  static void validate(const loom::sdk::Options& o, const loom::sdk::Host& host) {
    const int64_t k = o.i64("k");
    for (const char* key : {"train.steps", "train.exit_after", "checkpoint.every"}) {
      const int64_t v = host.config_i64(key);
      if (v % k != 0)
        throw loom::sdk::ConfigError("[plugins.local_sgd] k = " + std::to_string(k) +
                                     " does not divide " + key + " = " + std::to_string(v) +
                                     ": the run would end or save between two averages");
    }
    if (host.config_i64("parallel.cp") > 1)
      throw loom::sdk::ConfigError(
          "[plugins.local_sgd] runs without context parallelism: the "
          "cp ranks of a sequence share one model");
  }
  static constexpr loom::sdk::About about{
      .name = "local_sgd",
      .version = "1.0.0",
      .summary = "local SGD: replicas step alone and average every k steps (example plugin)",
      .options = kOptions,
      .option_rules = kRules,
      .validate = &validate,
      .cost = &cost,
      .capabilities = LOOM_DATA_DIVERGES,
      .services = LOOM_SERVICE_CONFIG};

  explicit LocalSgd(const loom::sdk::Context& ctx)
      : host_(ctx.host.raw()), k_(ctx.options.i64("k")) {}

  void setup(const loom_data_context& c) override { ctx_ = c; }
  void grad_ready(int64_t) override {}
  void finish_grads(double& comm_ms, double& exposed_comm_ms) override {
    comm_ms = exposed_comm_ms = 0;  // each replica keeps its own gradients
  }
  void after_update(const loom_step_info& s, bool, const loom_optimizer_state& o) override {
    if (!replicas_synced(s.step)) return;
    average(ctx_.values, ctx_.numel, "parameters");
    average(o.adam_m, o.numel, "first moments");
    average(o.adam_v, o.numel, "second moments");
  }
  bool replicas_synced(int64_t step) override { return step % k_ == 0; }

 private:
  void average(float* x, int64_t n, const char* what) {
    loom_tensor t = loom::sdk::flat_tensor(x, LOOM_F32, n);
    loom::sdk::ErrorBox e(host_);
    if (ctx_.comm->all_reduce(ctx_.comm_self, ctx_.dp, &t, LOOM_REDUCE_AVG, nullptr, e.get()) !=
        LOOM_OK)
      e.raise(std::string("local_sgd: averaging the ") + what);
  }
  const loom_host* host_;
  int64_t k_;
  loom_data_context ctx_{};
};

}  // namespace

LOOM_PLUGIN(loom::sdk::data_plugin<LocalSgd>())
