// cp: context parallelism. The cp ranks of a group hold different positions of the same
// sequences; attention, the only layer that mixes positions, reaches the other ranks' keys and
// values in one of two ways:
//
//  - ring (Liu et al. 2023, "Ring Attention"): each rank's packed K|V block goes round the group.
//    At step i rank r holds rank (r - i)'s block, computes its queries against it with the op
//    table's block kernel and folds the result in by log-sum-exp (attention_merge), while the
//    next block is already on its way. Backward sends the blocks round again, each followed by
//    the gradient of its keys and values, which every rank adds its share to before passing it
//    on; after a full turn it is back with its owner.
//  - allgather (as Llama 3 was trained): every block is gathered first, and the key gradients
//    are reduce-scattered back to their owners.
//
// The causal mask makes a contiguous split unfair: the rank holding the last positions sees every
// key, the first sees only its own. The zig-zag split cuts each sequence into 2 cp chunks and
// gives rank r chunks r and 2 cp - 1 - r, so every rank does the same work at every ring step.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <loom/sdk.hpp>
#include <string>
#include <vector>

namespace {

using loom::sdk::DeviceArray;
using loom::sdk::ErrorBox;
using loom::sdk::f32;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

class Cp : public loom::sdk::ContextPlugin {
 public:
  // Ring attention (Liu et al. 2023): per block and micro-batch, cp - 1 hops of this rank's k
  // and v forward, and of k, v and their gradients backward, each overlapped with the block
  // attention of the chunk already here (overlap = false: waited for). The all-gather algorithm
  // gathers every rank's k and v before the block's attention and reduce-scatters their
  // gradients after it, with nothing to hide behind (Llama 3's context parallelism).
  static std::vector<loom_cost_collective> cost(const loom_cost_query& q,
                                                const loom::sdk::Options& o) {
    using loom::sdk::collective;
    const int64_t kv = q.tokens * q.kv_width * q.act_bytes,
                  calls = int64_t(q.layers) * q.microbatches;
    if (o.str("algorithm") == "allgather")
      return {collective(LOOM_COST_ALL_GATHER, LOOM_COST_FORWARD, kv * q.group, calls, 0.0,
                         "k, v all-gather"),
              collective(LOOM_COST_REDUCE_SCATTER, LOOM_COST_BACKWARD, kv * q.group, calls, 0.0,
                         "k, v grads reduce-scatter")};
    const double hidden = o.boolean("overlap") ? 1.0 : 0.0;
    const int64_t hops = int64_t(q.group - 1) * calls;
    return {collective(LOOM_COST_SEND_RECV, LOOM_COST_FORWARD, kv, hops, hidden, "k, v ring"),
            collective(LOOM_COST_SEND_RECV, LOOM_COST_BACKWARD, 2 * kv, hops, hidden,
                       "k, v and grads ring")};
  }
  static constexpr loom_option_spec kOptions[] = {
      {"algorithm", LOOM_OPT_STRING, "\"ring\"",
       "ring (K/V blocks pass round the group, overlapped with compute) or allgather"},
      {"split", LOOM_OPT_STRING, "\"zigzag\"",
       "zigzag (two mirrored chunks per rank: balanced under the causal mask) or contiguous"},
      {"overlap", LOOM_OPT_BOOL, "true",
       "ring: send the next block while computing this one (false: wait first, to measure the "
       "transfers alone)"},
      {nullptr, 0, nullptr, nullptr}};
  static constexpr loom::sdk::About about{
      .name = "cp",
      .version = "1.0.0",
      .summary = "context parallel: ring or all-gather attention over a zig-zag split",
      .options = kOptions,
      .cost = &cost};

  explicit Cp(const loom::sdk::Context& ctx)
      : host_(ctx.host),
        algorithm_(ctx.options.str("algorithm")),
        split_(ctx.options.str("split")),
        overlap_(ctx.options.boolean("overlap")) {
    if (algorithm_ != "ring" && algorithm_ != "allgather")
      throw loom::sdk::ConfigError("[plugins.cp] algorithm = \"" + algorithm_ +
                                   "\": expected \"ring\" or \"allgather\"");
    if (split_ != "zigzag" && split_ != "contiguous")
      throw loom::sdk::ConfigError("[plugins.cp] split = \"" + split_ +
                                   "\": expected \"zigzag\" or \"contiguous\"");
  }

  void setup(const loom_context_context& ctx) override {
    ctx_ = ctx;
    n_ = ctx.comm->size(ctx.comm_self, ctx.cp);
    rank_ = ctx.comm->rank(ctx.comm_self, ctx.cp);
    const loom_host* h = host_.raw();
    for (auto* b : {&kv_[0], &kv_[1], &dkv_[0], &dkv_[1], &dkv_block_, &kv_all_, &dkv_all_, &q_,
                    &dq_, &dq_block_, &part_, &part_lse_})
      *b = DeviceArray<float>(h, ctx.ops, 0, "cp's attention buffers");
    // The kernels read every rank's positions from the device, uploaded once per sequence
    // length; masked() reads the host's copy.
    positions_.resize(n_);
    host_positions_.resize(n_);
    for (auto& p : positions_) p = DeviceArray<int64_t>(h, ctx.ops, 0, "cp's positions");
  }

  // zigzag: 2 cp chunks of c = T / (2 cp); rank r holds chunks r and 2 cp - 1 - r.
  // contiguous: rank r holds [r T / cp, (r + 1) T / cp).
  std::vector<loom_position_run> split(int64_t T, int rank) override {
    const int64_t parts = split_ == "zigzag" ? 2 * n_ : n_;
    if (T % parts != 0)
      throw loom::sdk::ConfigError(
          "[model] seq_len = " + std::to_string(T) + " is not a multiple of " +
          (split_ == "zigzag" ? "2 x cp = " : "cp = ") + std::to_string(parts) +
          (split_ == "zigzag"
               ? ": the zig-zag split gives each cp rank two chunks of every sequence"
               : ": each cp rank holds an equal part of every sequence"));
    const int64_t c = T / parts;
    if (split_ == "contiguous") return {{rank * c, c}};
    return {{rank * c, c}, {(2 * n_ - 1 - rank) * c, c}};
  }

  void attention_fwd(const loom_attention_args& a) override {
    prepare(a);
    if (algorithm_ == "ring")
      ring_fwd(a);
    else
      allgather_fwd(a);
  }

  void attention_bwd(const loom_attention_args& a) override {
    prepare(a);
    if (algorithm_ == "ring")
      ring_bwd(a);
    else
      allgather_bwd(a);
  }

  void stats(double& compute_ms, double& exposed_ms, int64_t& bytes) override {
    compute_ms = compute_ms_, exposed_ms = exposed_ms_, bytes = bytes_sent_;
    compute_ms_ = exposed_ms_ = 0, bytes_sent_ = 0;
  }

 private:
  // The block of keys from rank `src`: rows of [k (Hkv D) | v (Hkv D)].
  struct Shape {
    int64_t B, T, H, Hkv, D;
    int64_t kv_width() const { return 2 * Hkv * D; }
    int64_t kv_elems() const { return B * T * kv_width(); }
    int64_t q_elems() const { return B * T * H * D; }
  };

  // Byte moves within this rank's buffers, through the device's copies: on a device the host
  // cannot reach, a memcpy would fault.
  void copy(void* dst, const void* src, size_t bytes) const {
    ctx_.ops->copy(dst, src, static_cast<int64_t>(bytes));
  }
  void zero(void* dst, size_t bytes) const { ctx_.ops->zero(dst, static_cast<int64_t>(bytes)); }

  int next() const { return (rank_ + 1) % n_; }
  int prev() const { return (rank_ + n_ - 1) % n_; }

  // Every rank's positions for this sequence length (the split of T = T_local x cp).
  void prepare(const loom_attention_args& a) {
    s_ = {a.B, a.T, a.H, a.Hkv, a.D};
    if (a.T * n_ == seq_len_) return;
    seq_len_ = a.T * n_;
    for (int r = 0; r < n_; ++r) {
      std::vector<int64_t>& p = host_positions_[r];
      p.clear();
      for (const loom_position_run& run : split(seq_len_, r))
        for (int64_t t = 0; t < run.length; ++t) p.push_back(run.begin + t);
      copy(positions_[r].at_least(a.T), p.data(), static_cast<size_t>(a.T) * sizeof(int64_t));
    }
  }

  const int64_t* pos(int r) const { return positions_[r].data(); }
  // No query of this rank sees a key of rank src (causal): the block is skipped.
  bool masked(int src) const { return host_positions_[src][0] > host_positions_[rank_][s_.T - 1]; }

  // out rows are (b t, H D); lse [B, H, T]. Block src's share goes straight into out when first.
  void fold_block(const loom_attention_args& a, const float* kv, int src, bool first) {
    const loom_ops* o = ctx_.ops;
    const int64_t W = s_.kv_width(), C = s_.Hkv * s_.D;
    auto t0 = Clock::now();
    if (first) {
      o->attention_block_fwd(f32(a.out), a.lse, f32(a.q), f32(kv), f32(kv + C), a.ldq, W, s_.B,
                             s_.T, s_.T, s_.H, s_.Hkv, s_.D, pos(rank_), pos(src));
    } else if (!masked(src)) {
      float* part = part_.at_least(s_.q_elems());
      float* part_lse = part_lse_.at_least(s_.B * s_.H * s_.T);
      o->attention_block_fwd(f32(part), part_lse, f32(a.q), f32(kv), f32(kv + C), a.ldq, W, s_.B,
                             s_.T, s_.T, s_.H, s_.Hkv, s_.D, pos(rank_), pos(src));
      o->attention_merge(f32(a.out), a.lse, f32(part), part_lse, s_.B, s_.T, s_.H, s_.D);
    }
    compute_ms_ += ms_since(t0);
  }

  // Rows of [k | v] from the model's strided k and v.
  void pack_kv(float* kv, const loom_attention_args& a) const {
    const int64_t C = s_.Hkv * s_.D, W = s_.kv_width();
    for (int64_t row = 0; row < s_.B * s_.T; ++row) {
      copy(kv + row * W, a.k + row * a.ldkv, C * sizeof(float));
      copy(kv + row * W + C, a.v + row * a.ldkv, C * sizeof(float));
    }
  }

  void unpack_kv(const loom_attention_args& a, const float* dkv) const {
    const int64_t C = s_.Hkv * s_.D, W = s_.kv_width();
    for (int64_t row = 0; row < s_.B * s_.T; ++row) {
      copy(a.dk + row * a.ldkv, dkv + row * W, C * sizeof(float));
      copy(a.dv + row * a.ldkv, dkv + row * W + C, C * sizeof(float));
    }
  }

  // ---- point-to-point around the ring ----

  struct Transfer {
    loom_work* send = nullptr;
    loom_work* recv = nullptr;
  };

  // Receive first, then send: a bound pair reads its peer's messages in order. Both in one comm
  // group: every rank's ring step k is its group k, paired with its neighbours'.
  Transfer shift(float* out, float* in, int64_t n, int tag) {
    Transfer t;
    loom_tensor to = loom::sdk::flat_tensor(in, LOOM_F32, n),
                from = loom::sdk::flat_tensor(out, LOOM_F32, n);
    to.device = from.device = ctx_.device;
    ErrorBox e(host_.raw());
    const loom_comm_v2* c = ctx_.comm;
    const bool groups =
        LOOM_HAS_FIELD(&c->base, loom_comm_v2, group_end) && c->group_start && c->group_end;
    if (groups && c->group_start(ctx_.comm_self, ctx_.cp, e.get()) != LOOM_OK)
      e.raise("cp ring: group start");
    if (c->recv(ctx_.comm_self, ctx_.cp, &to, prev(), tag, &t.recv, e.get()) != LOOM_OK)
      e.raise("cp ring: receive from cp rank " + std::to_string(prev()));
    if (c->send(ctx_.comm_self, ctx_.cp, &from, next(), tag, &t.send, e.get()) != LOOM_OK)
      e.raise("cp ring: send to cp rank " + std::to_string(next()));
    if (groups && c->group_end(ctx_.comm_self, ctx_.cp, e.get()) != LOOM_OK)
      e.raise("cp ring: group end");
    bytes_sent_ += n * static_cast<int64_t>(sizeof(float));
    return t;
  }

  void finish(Transfer& t) {
    auto t0 = Clock::now();
    ErrorBox e(host_.raw());
    for (loom_work** w : {&t.send, &t.recv}) {
      if (*w && ctx_.comm->wait(ctx_.comm_self, *w, e.get()) != LOOM_OK)
        e.raise("cp ring transfer");
      *w = nullptr;
    }
    exposed_ms_ += ms_since(t0);
  }

  // Step i: fold in the block of rank (r - i) while the one of rank (r - i - 1) arrives.
  void ring_fwd(const loom_attention_args& a) {
    const int64_t n = s_.kv_elems();
    float* cur = kv_[0].at_least(n);
    float* nxt = kv_[1].at_least(n);
    pack_kv(cur, a);
    for (int i = 0; i < n_; ++i) {
      const int src = (rank_ - i + n_) % n_;
      Transfer t;
      const bool more = i + 1 < n_;
      if (more && overlap_) t = shift(cur, nxt, n, i);
      fold_block(a, cur, src, i == 0);
      if (more && !overlap_) t = shift(cur, nxt, n, i);
      if (more) finish(t), std::swap(cur, nxt);
    }
  }

  // This rank's queries against the block of rank src: dq += the block's share; dkv = its
  // keys' and values' share ([dk | dv] rows). Returns false for a masked block (nothing to add).
  bool block_grads(const loom_attention_args& a, const float* kv, int src, float* dkv) {
    if (masked(src)) return false;
    const loom_ops* o = ctx_.ops;
    const int64_t W = s_.kv_width(), C = s_.Hkv * s_.D, HD = s_.H * s_.D;
    float* dq = dq_block_.at_least(s_.q_elems());
    auto t0 = Clock::now();
    o->attention_block_bwd(f32(dq), f32(dkv), f32(dkv + C), f32(a.dout), f32(q_.data()), f32(kv),
                           f32(kv + C), f32(a.out), a.lse, HD, W, s_.B, s_.T, s_.T, s_.H, s_.Hkv,
                           s_.D, pos(rank_), pos(src));
    o->accumulate(f32(dq_.data()), f32(dq), s_.q_elems());
    compute_ms_ += ms_since(t0);
    return true;
  }

  // Contiguous copies of q (so dq shares its layout) and a zeroed dq sum.
  void start_bwd(const loom_attention_args& a) {
    const int64_t HD = s_.H * s_.D;
    float* q = q_.at_least(s_.q_elems());
    for (int64_t row = 0; row < s_.B * s_.T; ++row)
      copy(q + row * HD, a.q + row * a.ldq, HD * sizeof(float));
    zero(dq_.at_least(s_.q_elems()), s_.q_elems() * sizeof(float));
  }

  void finish_dq(const loom_attention_args& a) const {
    const int64_t HD = s_.H * s_.D;
    for (int64_t row = 0; row < s_.B * s_.T; ++row)
      copy(a.dq + row * a.ldq, dq_.data() + row * HD, HD * sizeof(float));
  }

  // Step i: rank r holds rank (r - i)'s block and, arriving from rank r - 1, the sum of the
  // shares of that block's gradient from ranks r - i .. r - 1; it adds its own share and passes
  // the sum on. After cp steps each sum has visited every rank and is back with its owner.
  void ring_bwd(const loom_attention_args& a) {
    const int64_t n = s_.kv_elems();
    start_bwd(a);
    float* cur = kv_[0].at_least(n);
    float* nxt = kv_[1].at_least(n);
    float* mine = dkv_block_.at_least(n);
    float* sum_in = dkv_[0].at_least(n);   // received from rank r - 1
    float* sum_out = dkv_[1].at_least(n);  // sent to rank r + 1
    pack_kv(cur, a);
    Transfer sums;
    for (int i = 0; i < n_; ++i) {
      const int src = (rank_ - i + n_) % n_;
      const bool more = i + 1 < n_;
      Transfer keys;
      if (more) keys = shift(cur, nxt, n, 2 * i);
      const bool added = block_grads(a, cur, src, mine);
      if (i > 0) finish(sums);  // sum_in: ranks (r - i) .. (r - 1)'s shares; sum_out is free
      auto t0 = Clock::now();
      if (i == 0 && added)
        copy(sum_out, mine, n * sizeof(float));
      else if (i == 0)
        zero(sum_out, n * sizeof(float));
      else if (added)
        ctx_.ops->add(f32(sum_out), f32(sum_in), f32(mine), n);
      else
        copy(sum_out, sum_in, n * sizeof(float));
      compute_ms_ += ms_since(t0);
      sums = shift(sum_out, sum_in, n, 2 * i + 1);
      if (more) finish(keys), std::swap(cur, nxt);
    }
    finish(sums);  // sum_in: every rank's share of this rank's block
    unpack_kv(a, sum_in);
    finish_dq(a);
  }

  // All blocks at once: kv_all[s] is rank s's block.
  float* gather_kv(const loom_attention_args& a) {
    const int64_t n = s_.kv_elems();
    float* mine = kv_[0].at_least(n);
    float* all = kv_all_.at_least(n * n_);
    pack_kv(mine, a);
    loom_tensor in = loom::sdk::flat_tensor(mine, LOOM_F32, n),
                out = loom::sdk::flat_tensor(all, LOOM_F32, n * n_);
    in.device = out.device = ctx_.device;
    auto t0 = Clock::now();
    ErrorBox e(host_.raw());
    if (ctx_.comm->all_gather(ctx_.comm_self, ctx_.cp, &in, &out, nullptr, e.get()) != LOOM_OK)
      e.raise("cp all-gather of keys and values");
    exposed_ms_ += ms_since(t0);
    bytes_sent_ += n * static_cast<int64_t>(sizeof(float)) * (n_ - 1);
    return all;
  }

  // Own block first, then the others in ring order (the same folding order as ring).
  void allgather_fwd(const loom_attention_args& a) {
    const float* all = gather_kv(a);
    for (int i = 0; i < n_; ++i) {
      const int src = (rank_ - i + n_) % n_;
      fold_block(a, all + src * s_.kv_elems(), src, i == 0);
    }
  }

  void allgather_bwd(const loom_attention_args& a) {
    const int64_t n = s_.kv_elems();
    start_bwd(a);
    const float* all = gather_kv(a);
    float* grads = dkv_all_.at_least(n * n_);
    for (int src = 0; src < n_; ++src)
      if (!block_grads(a, all + src * n, src, grads + src * n))
        zero(grads + src * n, n * sizeof(float));
    float* mine = dkv_block_.at_least(n);
    loom_tensor in = loom::sdk::flat_tensor(grads, LOOM_F32, n * n_),
                out = loom::sdk::flat_tensor(mine, LOOM_F32, n);
    in.device = out.device = ctx_.device;
    auto t0 = Clock::now();
    ErrorBox e(host_.raw());
    if (ctx_.comm->reduce_scatter(ctx_.comm_self, ctx_.cp, &in, &out, LOOM_REDUCE_SUM, nullptr,
                                  e.get()) != LOOM_OK)
      e.raise("cp reduce-scatter of key and value gradients");
    exposed_ms_ += ms_since(t0);
    bytes_sent_ += n * static_cast<int64_t>(sizeof(float)) * (n_ - 1);
    unpack_kv(a, mine);
    finish_dq(a);
  }

  loom::sdk::Host host_;
  std::string algorithm_, split_;
  bool overlap_;
  loom_context_context ctx_{};
  int n_ = 1, rank_ = 0;
  Shape s_{};
  int64_t seq_len_ = 0;
  DeviceArray<float> kv_[2], dkv_[2], dkv_block_, kv_all_, dkv_all_, q_, dq_, dq_block_, part_,
      part_lse_;
  std::vector<DeviceArray<int64_t>> positions_;       // on the device, for the kernels
  std::vector<std::vector<int64_t>> host_positions_;  // the same, for masked()
  double compute_ms_ = 0, exposed_ms_ = 0;
  int64_t bytes_sent_ = 0;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::context_plugin<Cp>())
