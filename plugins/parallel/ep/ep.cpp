// ep: expert parallelism (GShard, Switch). The E experts of every MoE layer are split into ep
// contiguous blocks, rank r holding experts [r E / ep, (r + 1) E / ep). A forward sends each
// routed row to its expert's rank and brings the expert's output back; two all-to-alls per
// direction, plus one of the per-expert counts so that every rank knows what it will receive.
//
// Rows leave grouped by expert in expert order, so the rows for one destination are one
// contiguous block. They arrive grouped by source rank; dispatch regroups them by local expert
// (each expert's rows contiguous, one GEMM per expert) and combine undoes that before sending
// them home.
#include <cstring>
#include <loom/sdk.hpp>
#include <string>
#include <vector>

namespace {

using loom::sdk::ErrorBox;

class Ep : public loom::sdk::ExpertPlugin {
 public:
  // GShard's dispatch and combine: per MoE block and micro-batch, two all-to-alls of the routed
  // tokens (tokens x top_k rows of d_model) forward and two backward.
  static std::vector<loom_cost_collective> cost(const loom_cost_query& q,
                                                const loom::sdk::Options&) {
    using loom::sdk::collective;
    const int64_t rows = q.tokens * q.top_k * q.d_model * q.act_bytes,
                  calls = 2 * int64_t(q.moe_layers) * q.microbatches;
    return {collective(LOOM_COST_ALL_TO_ALL, LOOM_COST_FORWARD, rows, calls, 0.0,
                       "token dispatch and combine"),
            collective(LOOM_COST_ALL_TO_ALL, LOOM_COST_BACKWARD, rows, calls, 0.0,
                       "gradient dispatch and combine")};
  }
  static constexpr loom::sdk::About about{
      .name = "ep",
      .version = "1.0.0",
      .summary = "expert parallel: experts split over ep, tokens moved by all-to-all",
      .cost = &cost,
      .services = LOOM_SERVICE_DEVICE};

  // The device's table (loom.device), when training: the regrouping copies go through it, since
  // the rows may be device memory the host cannot touch.
  explicit Ep(const loom::sdk::Context& ctx)
      : host_(ctx.host), device_(ctx.host.service<loom_ops>(LOOM_SERVICE_DEVICE)) {}

  void setup(const loom_expert_context& ctx, int32_t& first, int32_t& count) override {
    ctx_ = ctx;
    n_ = ctx.comm->size(ctx.comm_self, ctx.ep);
    rank_ = ctx.comm->rank(ctx.comm_self, ctx.ep);
    if (ctx.experts <= 0 || ctx.experts % n_ != 0)
      throw loom::sdk::ConfigError("[model.moe] experts = " + std::to_string(ctx.experts) +
                                   " is not a multiple of [parallel] ep = " + std::to_string(n_) +
                                   ": every ep rank holds the same number of experts");
    local_ = ctx.experts / n_;
    first = rank_ * local_;
    count = local_;
  }

  // Block d of `sent` (experts d E/ep ...) goes to rank d: an equal-block all-to-all.
  void exchange_counts(const int64_t* sent, int64_t* received) override {
    loom_tensor in = loom::sdk::flat_tensor(const_cast<int64_t*>(sent), LOOM_I64, ctx_.experts);
    loom_tensor out = loom::sdk::flat_tensor(received, LOOM_I64, ctx_.experts);
    ErrorBox e(host_.raw());
    if (ctx_.comm->all_to_all(ctx_.comm_self, ctx_.ep, &in, &out, nullptr, nullptr, nullptr,
                              e.get()) != LOOM_OK)
      e.raise("ep count exchange (all-to-all)");
  }

  void dispatch(const loom_tensor& rows, const int64_t* sent, const int64_t* received,
                loom_tensor& out) override {
    const int64_t width = row_width(rows);
    const std::vector<int64_t> to = per_rank(sent), from = per_rank(received);
    loom_tensor mid = staging(rows.dtype, total(from) * width);
    exchange(rows, mid, to, from, width, "ep dispatch (all-to-all)");
    regroup(mid, out, received, width, true);
  }

  void combine(const loom_tensor& rows, const int64_t* sent, const int64_t* received,
               loom_tensor& out) override {
    const int64_t width = row_width(rows);
    const std::vector<int64_t> to = per_rank(received), from = per_rank(sent);
    loom_tensor mid = staging(rows.dtype, total(to) * width);
    regroup(rows, mid, received, width, false);
    exchange(mid, out, to, from, width, "ep combine (all-to-all)");
  }

 private:
  // Rows per ep rank from rows per (rank, local expert).
  std::vector<int64_t> per_rank(const int64_t* counts) const {
    std::vector<int64_t> r(n_, 0);
    for (int d = 0; d < n_; ++d)
      for (int j = 0; j < local_; ++j) r[d] += counts[d * local_ + j];
    return r;
  }
  // The rows between the all-to-all and the regrouping (calls are synchronous: one buffer), on
  // the rows' device, so that neither the exchange nor the regrouping goes through the host.
  loom_tensor staging(int32_t dtype, int64_t n) {
    const int64_t bytes = n * static_cast<int64_t>(loom::sdk::element_size(dtype));
    void* p = nullptr;
    if (!device_) {
      staged_.resize(static_cast<size_t>(bytes));
      p = staged_.data();
    } else if (!staged_device_.data()) {
      staged_device_ =
          loom::sdk::DeviceArray<char>(host_.raw(), device_, bytes, "ep's dispatch staging");
      p = staged_device_.data();
    } else {
      p = staged_device_.at_least(bytes);
    }
    return loom::sdk::flat_tensor(p, static_cast<loom_dtype>(dtype), n);
  }
  static int64_t total(const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (int64_t x : v) s += x;
    return s;
  }
  static int64_t row_width(const loom_tensor& t) {
    int64_t w = 1;
    for (int i = 1; i < t.ndim; ++i) w *= t.shape[i];
    return w;
  }

  // Rows to[d] go to rank d, rows from[s] come from rank s, both packed in rank order.
  void exchange(const loom_tensor& in, loom_tensor& out, const std::vector<int64_t>& to,
                const std::vector<int64_t>& from, int64_t width, const char* what) {
    std::vector<int64_t> sc(n_), rc(n_);
    for (int d = 0; d < n_; ++d) sc[d] = to[d] * width, rc[d] = from[d] * width;
    loom_tensor i = loom::sdk::flat_tensor(in.data, static_cast<loom_dtype>(in.dtype), total(sc));
    loom_tensor o = loom::sdk::flat_tensor(out.data, static_cast<loom_dtype>(out.dtype), total(rc));
    ErrorBox e(host_.raw());
    if (ctx_.comm->all_to_all(ctx_.comm_self, ctx_.ep, &i, &o, sc.data(), rc.data(), nullptr,
                              e.get()) != LOOM_OK)
      e.raise(what);
  }

  // Source-major (for each source s, its rows for local experts 0..) <-> expert-major (for each
  // local expert j, the rows of sources 0..); received[s * local + j] rows in block (s, j).
  void regroup(const loom_tensor& in, loom_tensor& out, const int64_t* received, int64_t width,
               bool to_expert_major) {
    const size_t row = width * loom::sdk::element_size(in.dtype);
    std::vector<int64_t> source_at(n_ * local_), expert_at(n_ * local_);
    int64_t at = 0;
    for (int s = 0; s < n_; ++s)
      for (int j = 0; j < local_; ++j)
        source_at[s * local_ + j] = at, at += received[s * local_ + j];
    at = 0;
    for (int j = 0; j < local_; ++j)
      for (int s = 0; s < n_; ++s) expert_at[s * local_ + j] = at, at += received[s * local_ + j];
    const char* src = static_cast<const char*>(in.data);
    char* dst = static_cast<char*>(out.data);
    for (int b = 0; b < n_ * local_; ++b) {
      const int64_t from = to_expert_major ? source_at[b] : expert_at[b];
      const int64_t to = to_expert_major ? expert_at[b] : source_at[b];
      if (received[b] > 0) copy(dst + to * row, src + from * row, received[b] * row);
    }
  }

  void copy(void* dst, const void* src, size_t bytes) const {
    if (device_)
      device_->copy(dst, src, static_cast<int64_t>(bytes));
    else
      std::memcpy(dst, src, bytes);
  }

  loom::sdk::Host host_;
  const loom_ops* device_;
  loom_expert_context ctx_{};
  int n_ = 1, rank_ = 0, local_ = 0;
  std::vector<char> staged_;                    // without a device table (never when training)
  loom::sdk::DeviceArray<char> staged_device_;  // with one
};

}  // namespace

LOOM_PLUGIN(loom::sdk::expert_plugin<Ep>())
