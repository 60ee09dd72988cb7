// tp: Megatron-style tensor parallelism (Shoeybi et al. 2019) over the tp group.
//
// Column-parallel weights are split along their output features and row-parallel ones along
// their input features, so an MLP (fc column -> GELU -> proj row) or an attention block (QKV
// column, split by head -> local heads -> proj row) needs no communication inside. f enters such
// a region (identity forward, all-reduce backward), g leaves it (all-reduce forward, identity
// backward). The embedding table and the LM head are split by vocabulary; the cross-entropy
// all-reduces only the row max, the sum of exponentials and the target logit, so no rank ever
// holds the full logits.
#include <cmath>
#include <cstring>
#include <limits>
#include <loom/sdk.hpp>
#include <vector>

namespace {

using loom::sdk::ConfigError;
using loom::sdk::ErrorBox;
using loom::sdk::f32;

using loom::sdk::flat_tensor;

// The overlap option as it applies: "auto" is on unless the collectives share the compute's cores.
bool overlapping(const std::string& option, bool cpu) {
  return option == "on" || (option == "auto" && !cpu);
}

class Tp : public loom::sdk::TensorPlugin {
 public:
  // Megatron's f and g (Shoeybi et al. 2019): per block and micro-batch, an all-reduce of the
  // [tokens, d_model] activations after attention and after the MLP in forward, and of the input
  // gradients in backward; with sp those become gather/scatter pairs, costed by sp. The
  // vocab-split embedding adds one forward all-reduce; the loss reduces two floats per token.
  // With overlap the backward all-reduces run behind the weight-gradient GEMMs (hidden, as far as
  // the planner's compute window reaches) and a forward one exposes only its last row chunk.
  static std::vector<loom_cost_collective> cost(const loom_cost_query& q,
                                                const loom::sdk::Options& o) {
    using loom::sdk::collective;
    const int64_t act = q.tokens * q.d_model * q.act_bytes, m = q.microbatches;
    const bool cpu = LOOM_HAS_FIELD(&q, loom_cost_query, comm_shares_cores) && q.comm_shares_cores;
    const bool overlap = overlapping(o.str("overlap"), cpu);
    const double chunks = double(o.i64("overlap_chunks"));
    std::vector<loom_cost_collective> c;
    if (!q.sequence_parallel) {
      c.push_back(collective(LOOM_COST_ALL_REDUCE, LOOM_COST_FORWARD, act, 2 * q.layers * m,
                             overlap ? 1.0 - 1.0 / chunks : 0.0, "block outputs all-reduce"));
      c.push_back(collective(LOOM_COST_ALL_REDUCE, LOOM_COST_BACKWARD, act, 2 * q.layers * m,
                             overlap ? 1.0 : 0.0, "block input-grad all-reduce"));
    }
    c.push_back(
        collective(LOOM_COST_ALL_REDUCE, LOOM_COST_FORWARD, act, m, 0.0, "embedding all-reduce"));
    c.push_back(collective(LOOM_COST_ALL_REDUCE, LOOM_COST_FORWARD, q.tokens * 8, 2 * m, 0.0,
                           "loss max and sum"));
    return c;
  }
  static constexpr loom_option_spec kOptions[] = {
      {"overlap", LOOM_OPT_STRING, "\"auto\"",
       "on: f's backward collective behind the weight-gradient GEMMs, g's forward one (and sp's "
       "gather) in row "
       "chunks behind the GEMMs (the runtime issues them as the ABI defines f and g); off; auto: "
       "on "
       "for CUDA, off on "
       "CPUs, whose comm threads would take the compute's cores"},
      {"overlap_chunks", LOOM_OPT_INT, "4", "row chunks of a row-parallel GEMM under overlap"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom_option_rule kRules[] = {
      {"overlap", 1, 0, "auto|on|off", 0},
      {"overlap_chunks", 1, 64, nullptr, 0},
      {nullptr, 0, 0, nullptr, 0},
  };
  static constexpr loom::sdk::About about{
      .name = "tp",
      .version = "1.0.0",
      .summary = "tensor parallel: column/row-split linears, vocab-split embedding and loss",
      .options = kOptions,
      .option_rules = kRules,
      .cost = &cost};

  explicit Tp(const loom::sdk::Context& ctx) : host_(ctx.host) {}

  void setup(const loom_tensor_context& ctx) override {
    ctx_ = ctx;
    row_max_ = loom::sdk::DeviceArray<float>(host_.raw(), ctx.ops, 0, "the loss's row maxima");
    row_sums_ = loom::sdk::DeviceArray<float>(host_.raw(), ctx.ops, 0, "the loss's row sums");
    rank_ = ctx.comm->rank(ctx.comm_self, ctx.tp);
    size_ = ctx.comm->size(ctx.comm_self, ctx.tp);
  }

  loom_slice shard(loom_role role, int ndim, const int64_t* shape, int fused) override {
    if (role == LOOM_ROLE_REPLICATED || role == LOOM_ROLE_EXPERT || size_ == 1)
      return {0, 1, 0, -1};
    int dim = role == LOOM_ROLE_ROW ? 1 : 0;
    if (dim >= ndim) return {0, 1, 0, -1};  // the bias of a row-parallel layer: replicated
    int64_t part = shape[dim] / fused;
    if (part * fused != shape[dim] || part % size_ != 0)
      throw ConfigError(
          "tensor parallelism cannot split a dimension of " + std::to_string(shape[dim]) +
          (fused > 1 ? " (" + std::to_string(fused) + " fused parts)" : std::string()) +
          " over tp = " + std::to_string(size_));
    int64_t length = part / size_;
    return {dim, fused, rank_ * length, length};
  }

  void enter_bwd(loom_tensor& dh) override { all_reduce(dh, LOOM_REDUCE_SUM, "f backward"); }
  void exit_fwd(loom_tensor& y) override { all_reduce(y, LOOM_REDUCE_SUM, "g forward"); }

  // out[i] = wte_local[tokens[i] - vocab_begin] when this rank holds that row, else 0.
  void embedding_fwd(float* out, const int32_t* tokens, int64_t N, const float* wte, int64_t vb,
                     int64_t vl, int64_t C) override {
    const loom_ops* o = device();
    for (int64_t i = 0; i < N; ++i) {
      int64_t t = tokens[i] - vb;
      float* row = out + i * C;
      const bool held = t >= 0 && t < vl;
      if (o) {  // a device the host cannot reach: the rows move by its copies
        held ? o->copy(row, wte + t * C, C * sizeof(float)) : o->zero(row, C * sizeof(float));
      } else if (held) {
        std::memcpy(row, wte + t * C, C * sizeof(float));
      } else {
        std::memset(row, 0, C * sizeof(float));
      }
    }
  }

  void embedding_bwd(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int64_t vb,
                     int64_t vl, int64_t C) override {
    const loom_ops* o = device();
    for (int64_t i = 0; i < N; ++i) {
      int64_t t = tokens[i] - vb;
      if (t < 0 || t >= vl) continue;
      float* d = dwte + t * C;
      const float* g = dout + i * C;
      if (o) {
        o->accumulate(f32(d), f32(g), C);  // in row order, as below: the same sums
        continue;
      }
      for (int64_t c = 0; c < C; ++c) d[c] += g[c];
    }
  }

  // Per row i over the real classes (column j real when vocab_begin + j < vocab_real):
  //   m = max_j z_j (all-reduce max), s = sum_j exp(z_j - m) (all-reduce sum),
  //   z_t = the target's logit (all-reduce sum; 0 on ranks that do not hold it),
  //   loss_i = log s + m - z_t;  grad z_j = dloss (exp(z_j - m) / s - [j = t]).
  // Each step is an op-table kernel (row_max, xent_stats, xent_grad) between the all-reduces, so
  // the logits stay where they are; only 3 floats per row cross, and the losses come back.
  double cross_entropy(float* z, const int32_t* targets, int64_t N, int64_t vb, int64_t vl,
                       int64_t vr, float dloss) override {
    const loom_ops* o = ctx_.ops;
    const int64_t real = std::max<int64_t>(0, std::min(vl, vr - vb));
    float* mx = row_max_.at_least(N);
    float* sums = row_sums_.at_least(2 * N);
    o->row_max(mx, f32(z), N, vl, real);
    loom_tensor tm = flat_tensor(mx, LOOM_F32, N);
    all_reduce(tm, LOOM_REDUCE_MAX, "cross-entropy max");
    o->xent_stats(sums, f32(z), targets, mx, N, vl, real, vb);
    loom_tensor ts = flat_tensor(sums, LOOM_F32, 2 * N);
    all_reduce(ts, LOOM_REDUCE_SUM, "cross-entropy sums");
    losses_.resize(static_cast<size_t>(N));
    o->xent_grad(f32(z), losses_.data(), targets, mx, sums, N, vl, real, vb, dloss);
    double total = 0;
    for (int64_t i = 0; i < N; ++i)
      if (targets[i] >= 0) total += losses_[i];
    return total;
  }

 private:
  // The op table when the host cannot dereference its memory, else nullptr.
  const loom_ops* device() const {
    const loom_ops* o = ctx_.ops;
    return o && !o->host_reachable ? o : nullptr;
  }

  void all_reduce(loom_tensor& t, loom_reduce_op op, const char* what) {
    ErrorBox e(host_.raw());
    if (ctx_.comm->all_reduce(ctx_.comm_self, ctx_.tp, &t, op, nullptr, e.get()) != LOOM_OK)
      e.raise(std::string("tp ") + what);
  }

  loom::sdk::Host host_;
  loom_tensor_context ctx_{};
  int rank_ = 0, size_ = 1;
  loom::sdk::DeviceArray<float> row_max_, row_sums_;  // the loss's statistics, where the logits are
  std::vector<float> losses_;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::tensor_plugin<Tp>())
