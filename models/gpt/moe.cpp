#include "gpt/moe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/errors.hpp"
#include "parallel/context_attention.hpp"
#include "parallel/expert_dispatch.hpp"

namespace loom::gpt {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A [rows, cols] view of `t`, reallocated when it is too small (routed row counts vary).
Tensor rows_view(Tensor& t, int64_t rows, int64_t cols) {
  if (!t.defined() || t.numel() < std::max<int64_t>(rows, 1) * cols)
    t = Tensor::empty({std::max<int64_t>(rows, 1), cols});
  return Tensor::borrow(t.f32(), {std::max<int64_t>(rows, 1), cols});
}

}  // namespace

// What one micro-batch's forward keeps for backward. Rows r = 0..R-1 are the kept (token,
// choice) assignments grouped by expert: expert e owns rows [first[e], first[e + 1]).
struct MoeMlp::Acts {
  // The router's probabilities stay on the device; the op table's router_topk hands the host
  // each token's experts and each sequence's sums, all the routing decisions need.
  Tensor logits, probs, lse, weights;  // [N, E] (the router GEMM's output), [N, E], [N], [N, K]
  std::vector<int32_t> expert;         // [N * K]: token t's k-th expert
  std::vector<double>
      seq;  // [B, E + 1]: each sequence's sum of p_e over its rows here, and of lse^2
  std::vector<int32_t> slot;          // [N * K]: its row, or -1 when dropped
  std::vector<int32_t> token;         // [R]: each row's token
  std::vector<int64_t> first;         // [E + 1]
  std::vector<int64_t> load;          // [E]: this rank's assignments before capacity
  std::vector<double> share, mean_p;  // [B, E]: f_e and P_e of each sequence, all its positions
  std::vector<double> seq_aux;        // [B]: each sequence's E sum_e f_e P_e
  int64_t T = 0, dropped = 0;         // rows per sequence here; this rank's dropped assignments
  Tensor xin, yexp;                   // [R, C]: this rank's kept rows, in and out of the experts
  // The rows the local experts run on, local expert j owning rows [route.first[j], ...): under
  // expert parallelism what dispatch brought here from the ep group, otherwise xin and yexp
  // themselves.
  ExpertRoute route;
  Tensor xl, fc, act, yl;  // [Rl, C], [Rl, FO], [Rl, F], [Rl, C]
  int64_t n = 0;
  Acts(const model::Config& c, int64_t rows) {
    const int64_t E = c.moe.experts, K = c.moe.top_k, R = rows * K, F = c.d_ff;
    const int64_t FO = c.mlp == "swiglu" ? 2 * F : F;
    logits = Tensor::empty({rows, E});
    probs = Tensor::empty({rows, E});
    lse = Tensor::empty({rows});
    weights = Tensor::empty({rows, K});
    xin = Tensor::empty({R, c.d_model});
    fc = Tensor::empty({R, FO});
    act = Tensor::empty({R, F});
    yexp = Tensor::empty({R, c.d_model});
  }
  // Routes this micro-batch's kept rows to the local experts: the ep exchange, or all here.
  void to_local_experts(ExpertDispatch* ex, int64_t E, int64_t C) {
    route.sent.resize(E);
    for (int64_t e = 0; e < E; ++e) route.sent[e] = first[e + 1] - first[e];
    if (!ex) {
      route.first = first;
      xl = xin, yl = yexp;
      return;
    }
    ex->exchange(route);
    Tensor out = rows_view(xl, route.rows_local(), C);
    ex->dispatch(route, Tensor::borrow(xin.f32(), {std::max<int64_t>(first[E], 1), C}), out);
  }
};

MoeMlp::MoeMlp(const std::string& prefix, const model::Config& c, LayerApi& api, ParamStore& ps,
               std::vector<Param*>& owner, int64_t rows)
    : c_(c), api_(api) {
  const int64_t C = c.d_model, F = c.d_ff, E = c.moe.experts, FO = c.mlp == "swiglu" ? 2 * F : F;
  const float resid_std = c.init_std / std::sqrt(2.f * c.n_layer);
  const Init normal{Init::Normal, c.init_std}, resid{Init::Normal, resid_std},
      zeros{Init::Zeros, 0.f};
  router_ =
      &declare_param(ps, api, owner, prefix + "router.w", Role::Replicated, {E, C}, normal, false);
  fc_w_ = &declare_param(ps, api, owner, prefix + "fc.w", Role::Expert, {E, FO, C}, normal, true);
  if (c.bias)
    fc_b_ = &declare_param(ps, api, owner, prefix + "fc.b", Role::Expert, {E, FO}, zeros, false);
  out_w_ = &declare_param(ps, api, owner, prefix + "proj.w", Role::Expert, {E, C, F}, resid, true);
  if (c.bias)
    out_b_ = &declare_param(ps, api, owner, prefix + "proj.b", Role::Expert, {E, C}, zeros, false);
  acts_ = std::make_unique<Slots<Acts>>();
  acts_->init([&c, rows] { return std::make_unique<Acts>(c, rows); });
  stats_.load.assign(E, 0);
}

MoeMlp::~MoeMlp() = default;

void MoeMlp::use_slot(int k) { acts_->use(k); }

int64_t MoeMlp::saved_bytes(int64_t rows) const {
  const int64_t E = c_.moe.experts, K = c_.moe.top_k, C = c_.d_model, F = c_.d_ff;
  const int64_t FO = c_.mlp == "swiglu" ? 2 * F : F, R = rows * K;
  return 4 * (rows * (2 * E + 1 + K) + R * (2 * C + FO + F));
}

double MoeMlp::aux_objective() const {
  return c_.moe.aux_coef * last_aux_ + c_.moe.z_coef * last_z_;
}

void MoeMlp::reset_stats() {
  stats_ = MoeStats{};
  stats_.load.assign(c_.moe.experts, 0);
}

// A micro-batch's routing as whole sequences, for capacity and the statistics: sequence b's
// experts at each of its L positions (K each, in the token's order) and each expert's
// probability sum over them. Under cp the ranks holding a sequence's other positions send theirs.
struct MoeMlp::Choices {
  int64_t B = 0, L = 0;
  std::vector<int32_t> expert;    // [B, L, K]
  std::vector<double> psum;       // [B, E]
  std::vector<int64_t> position;  // [T]: the position of each local row of a sequence
};

// probs = softmax(h Wr^T); each token's top k (ties to the lower expert) with weights
// renormalised over the k (k = 1 keeps the raw probability, as Switch): the router GEMM and the
// op table's router_topk, which writes the experts and the sequences' sums to the host.
void MoeMlp::choose_experts(const Tensor& h, int64_t T, Acts& a) {
  const loom_ops_v2* o = api_.ops();
  const int64_t N = h.dim(0), C = c_.d_model, E = c_.moe.experts, K = c_.moe.top_k;
  a.n = N;
  o->gemm(0, 1, N, E, C, 1.f, h.f32(), C, router_->value.f32(), C, 0.f, a.logits.f32(), E);
  a.expert.assign(N * K, 0);
  a.seq.assign((N / T) * (E + 1), 0.0);
  o->router_topk(a.probs.f32(), a.lse.f32(), a.weights.f32(), a.expert.data(), a.seq.data(),
                 a.logits.f32(), N, E, K, T);
  a.load.assign(E, 0);
  for (int32_t e : a.expert) ++a.load[e];
}

// Routing groups are sequences: capacity, f_e and P_e are each sequence's own, over all its
// positions, whichever ranks hold them, so they do not depend on the layout.
void MoeMlp::route(const Tensor& h, int64_t T, Acts& a) {
  const int64_t E = c_.moe.experts, K = c_.moe.top_k;
  if (T <= 0 || h.dim(0) % T != 0)
    throw RuntimeError("MoE routing got " + std::to_string(h.dim(0)) +
                       " rows, not whole sequences of " + std::to_string(T) +
                       ": routing groups are sequences");
  choose_experts(h, T, a);
  a.T = T;
  Choices seqs;
  seqs.B = a.n / T;
  const ContextAttention* cp = api_.context();
  seqs.L = cp ? cp->seq_len() : T;
  for (int64_t i = 0; i < T; ++i) seqs.position.push_back(cp ? cp->position(i) : i);
  if (!cp) {  // whole sequences here: router_topk's sums are theirs
    seqs.expert = a.expert;
    seqs.psum.assign(seqs.B * E, 0.0);
    for (int64_t b = 0; b < seqs.B; ++b)
      for (int64_t e = 0; e < E; ++e) seqs.psum[b * E + e] = a.seq[b * (E + 1) + e];
  } else {  // [positions (T) | per sequence: experts (T K), probability sums (E)] from every cp
            // rank
    std::vector<double> mine(seqs.position.begin(), seqs.position.end());
    for (int64_t b = 0; b < seqs.B; ++b) {
      for (int64_t i = 0; i < T * K; ++i) mine.push_back(a.expert[b * T * K + i]);
      for (int64_t e = 0; e < E; ++e) mine.push_back(a.seq[b * (E + 1) + e]);
    }
    const std::vector<double> all = cp->all_gather(mine);
    const int64_t per = static_cast<int64_t>(mine.size());
    seqs.expert.assign(seqs.B * seqs.L * K, 0);
    seqs.psum.assign(seqs.B * E, 0.0);
    for (int r = 0; r < cp->size(); ++r) {
      const double* x = &all[r * per];
      for (int64_t b = 0; b < seqs.B; ++b) {
        const double* xb = x + T + b * (T * K + E);
        for (int64_t i = 0; i < T; ++i)
          for (int64_t k = 0; k < K; ++k)
            seqs.expert[(b * seqs.L + static_cast<int64_t>(x[i])) * K + k] =
                static_cast<int32_t>(xb[i * K + k]);
        for (int64_t e = 0; e < E; ++e) seqs.psum[b * E + e] += xb[T * K + e];
      }
    }
  }
  a.share.assign(seqs.B * E, 0.0), a.mean_p.assign(seqs.B * E, 0.0), a.seq_aux.assign(seqs.B, 0.0);
  for (int64_t b = 0; b < seqs.B; ++b) {
    for (int64_t i = 0; i < seqs.L * K; ++i)
      a.share[b * E + seqs.expert[b * seqs.L * K + i]] += 1.0;
    for (int64_t e = 0; e < E; ++e) {
      a.share[b * E + e] /= static_cast<double>(seqs.L * K);
      a.mean_p[b * E + e] = seqs.psum[b * E + e] / static_cast<double>(seqs.L);
      a.seq_aux[b] += E * a.share[b * E + e] * a.mean_p[b * E + e];
    }
  }
  keep_within_capacity(seqs, a);
}

// Capacity: an expert keeps the first ceil(factor L K / E) assignments of each sequence in
// (position, k) order; this rank's kept rows are then grouped by expert, in token order.
void MoeMlp::keep_within_capacity(const Choices& seqs, Acts& a) {
  const int64_t E = c_.moe.experts, K = c_.moe.top_k, N = a.n, T = a.T, L = seqs.L;
  const int64_t cap = c_.moe.dropless || !capacity_on_
                          ? std::numeric_limits<int64_t>::max()
                          : static_cast<int64_t>(std::ceil(c_.moe.capacity_factor * L * K / E));
  std::vector<char> kept(seqs.B * L * K, 0);
  for (int64_t b = 0; b < seqs.B; ++b) {
    std::vector<int64_t> seen(E, 0);
    for (int64_t i = 0; i < L * K; ++i)
      kept[b * L * K + i] = seen[seqs.expert[b * L * K + i]]++ < cap;
  }
  std::vector<int32_t> taken(E, 0);
  a.slot.assign(N * K, -1);
  a.dropped = 0;
  for (int64_t i = 0; i < N * K; ++i) {
    const int64_t t = i / K, b = t / T, at = (b * L + seqs.position[t % T]) * K + i % K;
    if (kept[at])
      a.slot[i] = taken[a.expert[i]]++;
    else
      ++a.dropped;
  }
  a.first.assign(E + 1, 0);
  for (int64_t e = 0; e < E; ++e) a.first[e + 1] = a.first[e] + taken[e];
  a.token.assign(a.first[E], 0);
  for (int64_t i = 0; i < N * K; ++i)
    if (a.slot[i] >= 0) {
      a.slot[i] += static_cast<int32_t>(a.first[a.expert[i]]);
      a.token[a.slot[i]] = static_cast<int32_t>(i / K);
    }
}

void MoeMlp::forward(const Tensor& h, Tensor& y, int64_t T) {
  const loom_ops_v2* o = api_.ops();
  Acts& a = **acts_;
  route(h, T, a);
  const int64_t C = c_.d_model, E = c_.moe.experts, F = c_.d_ff;
  const int64_t FO = c_.mlp == "swiglu" ? 2 * F : F, R = a.first[E];
  o->gather_rows(a.xin.f32(), h.f32(), a.token.data(), R, C);
  ExpertDispatch* ex = api_.experts();
  auto t0 = Clock::now();
  a.to_local_experts(ex, E, C);
  stats_.all_to_all_ms += ex ? ms_since(t0) : 0.0;
  const int64_t Rl = a.route.rows_local();
  rows_view(a.fc, Rl, FO), rows_view(a.act, Rl, F), rows_view(a.yl, Rl, C);
  // Each local expert j: y = W2_j act(W1_j x + b1_j) + b2_j over its rows.
  for (int64_t j = 0; j + 1 < static_cast<int64_t>(a.route.first.size()); ++j) {
    const int64_t r0 = a.route.first[j], n = a.route.first[j + 1] - r0;
    if (n == 0) continue;
    float *xin = a.xl.f32() + r0 * C, *fc = a.fc.f32() + r0 * FO, *act = a.act.f32() + r0 * F,
          *ye = a.yl.f32() + r0 * C;
    o->gemm(0, 1, n, FO, C, 1.f, xin, C, fc_w_->value.f32() + j * FO * C, C, 0.f, fc, FO);
    if (fc_b_) o->bias_add(fc, fc_b_->value.f32() + j * FO, n, FO);
    activation_fwd(o, c_, act, fc, n, F);
    o->gemm(0, 1, n, C, F, 1.f, act, F, out_w_->value.f32() + j * C * F, F, 0.f, ye, C);
    if (out_b_) o->bias_add(ye, out_b_->value.f32() + j * C, n, C);
  }
  if (ex) {  // the experts' outputs go home, in the layout xin had
    t0 = Clock::now();
    Tensor back = Tensor::borrow(a.yexp.f32(), {std::max<int64_t>(R, 1), C});
    ex->combine(a.route, rows_view(a.yl, Rl, C), back);
    stats_.all_to_all_ms += ms_since(t0);
  }
  combine(a, y);
  record_stats(a);
}

// y_t = sum_k w_tk y_{e_tk}(t) over kept assignments, k in order (combine_rows).
void MoeMlp::combine(Acts& a, Tensor& y) const {
  api_.ops()->combine_rows(y.f32(), a.yexp.f32(), a.weights.f32(), a.slot.data(), a.n, c_.moe.top_k,
                           c_.d_model);
}

// Auxiliary losses: each sequence's E sum_e f_e P_e, counted per token as the cross-entropy is,
// and the z-loss mean_t lse_t^2; the stats sum this rank's tokens.
void MoeMlp::record_stats(const Acts& a) {
  const int64_t N = a.n, K = c_.moe.top_k, E = c_.moe.experts;
  double aux = 0, z = 0;
  for (double s : a.seq_aux) aux += s;
  for (size_t b = 0; b < a.seq.size() / (E + 1); ++b) z += a.seq[b * (E + 1) + E];
  last_aux_ = a.seq_aux.empty() ? 0.0 : aux / static_cast<double>(a.seq_aux.size());
  last_z_ = z / N;
  stats_.aux += aux * static_cast<double>(a.T);
  stats_.z += z;
  stats_.tokens += N;
  for (size_t e = 0; e < a.load.size(); ++e) stats_.load[e] += a.load[e];
  stats_.assignments += N * K;
  stats_.dropped += a.dropped;
}

void MoeMlp::backward(const Tensor& h, const Tensor& dy, Tensor& dh, float dloss) {
  const loom_ops_v2* o = api_.ops();
  const Acts& a = **acts_;
  const int64_t N = a.n, C = c_.d_model, E = c_.moe.experts, K = c_.moe.top_k, R = a.first[E];
  // Combine backward: d y_e(row) = w dy_t; d w_tk = <dy_t, y_e(row)>.
  Tensor dye = Tensor::empty({std::max<int64_t>(R, 1), C}),
         dxin = Tensor::empty({std::max<int64_t>(R, 1), C});
  Tensor dw = Tensor::empty({std::max<int64_t>(N * K, 1)});
  o->combine_rows_bwd(dye.f32(), dw.f32(), dy.f32(), a.yexp.f32(), a.weights.f32(), a.slot.data(),
                      N, K, C);
  experts_backward(a, dye, dxin);
  // dh_t = sum over its kept choices of the experts' input gradients; the router's adds to it.
  o->combine_rows(dh.f32(), dxin.f32(), nullptr, a.slot.data(), N, K, C);
  router_backward(h, a, dw, dh, dloss);
}

// Each local expert's MLP backward over its rows (under ep: the output gradients go to the
// experts' ranks first, and the input gradients come back).
void MoeMlp::experts_backward(const Acts& a, Tensor& dye, Tensor& dxin) {
  const loom_ops_v2* o = api_.ops();
  const int64_t C = c_.d_model, F = c_.d_ff, FO = c_.mlp == "swiglu" ? 2 * F : F;
  ExpertDispatch* ex = api_.experts();
  const int64_t Rl = a.route.rows_local();
  Tensor dyl = dye, dxl = dxin;
  auto t0 = Clock::now();
  if (ex) {
    dyl = Tensor::empty({std::max<int64_t>(Rl, 1), C}),
    dxl = Tensor::empty({std::max<int64_t>(Rl, 1), C});
    ex->dispatch(a.route, dye, dyl);
  }
  double a2a = ex ? ms_since(t0) : 0.0;
  Tensor dact = Tensor::empty({std::max<int64_t>(Rl, 1), F}),
         dfc = Tensor::empty({std::max<int64_t>(Rl, 1), FO});
  for (int64_t j = 0; j + 1 < static_cast<int64_t>(a.route.first.size()); ++j) {
    const int64_t r0 = a.route.first[j], n = a.route.first[j + 1] - r0;
    if (n == 0) continue;
    const float *xin = a.xl.f32() + r0 * C, *fc = a.fc.f32() + r0 * FO, *act = a.act.f32() + r0 * F;
    float *d_y = dyl.f32() + r0 * C, *d_act = dact.f32() + r0 * F, *d_fc = dfc.f32() + r0 * FO,
          *d_x = dxl.f32() + r0 * C;
    if (out_b_) o->bias_bwd(out_b_->grad.f32() + j * C, d_y, n, C);
    o->gemm(0, 0, n, F, C, 1.f, d_y, C, out_w_->value.f32() + j * C * F, F, 0.f, d_act, F);
    o->gemm(1, 0, C, F, n, 1.f, d_y, C, act, F, 1.f, out_w_->grad.f32() + j * C * F, F);
    activation_bwd(o, c_, d_fc, fc, d_act, n, F);
    if (fc_b_) o->bias_bwd(fc_b_->grad.f32() + j * FO, d_fc, n, FO);
    o->gemm(0, 0, n, C, FO, 1.f, d_fc, FO, fc_w_->value.f32() + j * FO * C, C, 0.f, d_x, C);
    o->gemm(1, 0, FO, C, n, 1.f, d_fc, FO, xin, C, 1.f, fc_w_->grad.f32() + j * FO * C, C);
  }
  if (ex) {
    t0 = Clock::now();
    ex->combine(a.route, dxl, dxin);
    a2a += ms_since(t0);
  }
  stats_.all_to_all_ms += a2a;
}

// Router: d p from the weights (renormalised: d p_k = (d w_k - sum_j d w_j w_j) / S), plus the
// load-balancing term coef E f_e (the token's sequence's f_e) per token, then through the
// softmax, plus the z-loss term 2 z_coef lse_t p_te; both auxiliary terms weigh a token as the
// main loss does (dloss). router_topk_bwd runs it per token; the balance term is the host's.
void MoeMlp::router_backward(const Tensor& h, const Acts& a, const Tensor& dw, Tensor& dh,
                             float dloss) {
  const loom_ops_v2* o = api_.ops();
  const int64_t N = a.n, C = c_.d_model, E = c_.moe.experts, K = c_.moe.top_k;
  std::vector<double> balance(a.share.size());
  for (size_t i = 0; i < balance.size(); ++i) balance[i] = c_.moe.aux_coef * E * a.share[i] * dloss;
  Tensor dlogits =
      a.logits.rows(0, N);  // the forward's logits are spent: their buffer takes the gradient
  o->router_topk_bwd(dlogits.f32(), a.probs.f32(), a.lse.f32(), a.weights.f32(), dw.f32(),
                     a.expert.data(), balance.data(), 2.0 * c_.moe.z_coef * dloss, N, E, K, a.T);
  o->gemm(1, 0, E, C, N, 1.f, dlogits.f32(), E, h.f32(), C, 1.f, router_->grad.f32(), C);
  o->gemm(0, 0, N, C, E, 1.f, dlogits.f32(), E, router_->value.f32(), C, 1.f, dh.f32(), C);
}

}  // namespace loom::gpt
