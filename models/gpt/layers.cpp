#include "gpt/layers.hpp"

#include "gpt/moe.hpp"
#include "parallel/expert_dispatch.hpp"

#include <cmath>
#include <cstring>

namespace loom::gpt {

namespace {

// The vocabulary is padded to a multiple of 64 per tensor-parallel rank.
int64_t vocab_rows(const GptConfig& c, const LayerApi& api) { return c.padded_vocab(64 * api.tp_size()); }

Tensor rows_of(const Tensor& t, int64_t rows) { return t.rows(0, rows); }

// A [rows, cols] view of the front of a buffer allocated for the unsharded layer: under tensor
// parallelism a rank's widths are a fraction of the buffer's.
Tensor view(const Tensor& buf, int64_t rows, int64_t cols) { return Tensor::borrow(buf.data(), {rows, cols}); }

Init normal(float std) { return {Init::Normal, std}; }
constexpr Init kZeros{Init::Zeros, 0.f};
constexpr Init kOnes{Init::Ones, 0.f};

int64_t local_dim0(const Param& p) { return p.local_shape[0]; }

}  // namespace

// Segment marks of the profiled block; a no-op for every other block.
struct Marks {
  SegmentProfile& p;
  bool on;
  Marks(SegmentProfile& prof, bool enabled) : p(prof), on(enabled) {
    if (on) p.active = true, p.begin();
  }
  ~Marks() {
    if (on) p.active = false;
  }
  void operator()(const char* name) {
    if (on) p.mark(name);
  }
};

Param& declare_param(ParamStore& ps, LayerApi& api, std::vector<Param*>& owner, std::string name,
                     Role role, std::vector<int64_t> shape, Init init, bool decay, int fused) {
  // Experts are split by the expert slot (over ep), everything else by the tensor slot (over tp).
  const ExpertDispatch* ex = api.experts();
  Slice s = role == Role::Expert && ex ? Slice{0, ex->first_expert(), ex->local_experts(), 1} : api.shard(role, shape, fused);
  Param& p = ps.declare(std::move(name), role, std::move(shape), init, decay, s);
  owner.push_back(&p);
  return p;
}

NormActs::NormActs(int64_t rows, int64_t C)
    : out(Tensor::empty({rows, C})), mean(Tensor::empty({rows})), rstd(Tensor::empty({rows})) {}

Block::Acts::Acts(const GptConfig& c, int64_t rows)
    : x_in(Tensor::empty({rows, c.d_model})), x_mid(Tensor::empty({rows, c.d_model})),
      qkv(Tensor::empty({rows, 3 * c.d_model})), att(Tensor::empty({rows, c.d_model})),
      lse(Tensor::empty({rows * c.n_head})),
      fc(Tensor::empty({rows, c.mlp == "swiglu" ? 2 * c.d_ff : c.d_ff})),
      act(Tensor::empty({rows, c.d_ff})), ln1(rows, c.d_model), ln2(rows, c.d_model) {}

Head::Acts::Acts(int64_t rows, int64_t C, int64_t vocab_local)
    : x_in(Tensor::empty({rows, C})), logits(Tensor::empty({rows, vocab_local})), norm(rows, C) {}

Scratch::Scratch(const GptConfig& c, int64_t rows) {
  int64_t fc_out = c.mlp == "swiglu" ? 2 * c.d_ff : c.d_ff;
  dh = Tensor::empty({rows, c.d_model});
  dqkv = Tensor::empty({rows, 3 * c.d_model});
  datt = Tensor::empty({rows, c.d_model});
  dfc = Tensor::empty({rows, fc_out});
  dact = Tensor::empty({rows, c.d_ff});
}

// ---- embedding --------------------------------------------------------------------------------

Embedding::Embedding(const GptConfig& c, LayerApi& api, ParamStore& ps) : api_(api) {
  wte_ = &declare_param(ps, api, params_, "wte", Role::Vocab, {vocab_rows(c, api), c.d_model},
                  normal(c.init_std), false);
  wpe_ = &declare_param(ps, api, params_, "wpe", Role::Replicated, {c.seq_len, c.d_model}, normal(c.init_std),
                  false);
}

void Embedding::forward(const Microbatch& mb, Tensor& x) {
  api_.embedding(x, mb.tokens, mb.B, mb.T, *wte_, wpe_);
}

void Embedding::backward(const Microbatch& mb, Tensor& dx) {
  api_.embedding_bwd(dx, mb.tokens, mb.B, mb.T, *wte_, wpe_);
}

// ---- transformer block ------------------------------------------------------------------------

Block::Block(int index, const GptConfig& c, LayerApi& api, ParamStore& ps, Scratch& scratch,
             int64_t rows, bool profile)
    : name_("block" + std::to_string(index)), c_(c), api_(api), s_(scratch),
      profiled_(index == 0 && profile) {
  const int64_t C = c.d_model, F = c.d_ff, fc_out = c.mlp == "swiglu" ? 2 * F : F;
  const std::string p = "h" + std::to_string(index) + ".";
  // Residual projections are scaled by 1/sqrt(2 L) so the residual stream's variance stays
  // bounded with depth (GPT-2).
  const float resid_std = c.init_std / std::sqrt(2.f * c.n_layer);
  bool ln = c.norm == "layernorm";
  for (auto [n, tag] : {std::pair{&ln1_, "ln1"}, std::pair{&ln2_, "ln2"}}) {
    n->w = &declare_param(ps, api, params_, p + tag + ".w", Role::Replicated, {C}, kOnes, false);
    if (ln) n->b = &declare_param(ps, api, params_, p + tag + ".b", Role::Replicated, {C}, kZeros, false);
  }
  // QKV is three matrices stacked along the output features; tp splits each of them by head.
  qkv_w_ = &declare_param(ps, api, params_, p + "attn.qkv.w", Role::Column, {3 * C, C}, normal(c.init_std), true, 3);
  qkv_b_ = &declare_param(ps, api, params_, p + "attn.qkv.b", Role::Column, {3 * C}, kZeros, false, 3);
  proj_w_ = &declare_param(ps, api, params_, p + "attn.proj.w", Role::Row, {C, C}, normal(resid_std), true);
  proj_b_ = &declare_param(ps, api, params_, p + "attn.proj.b", Role::Replicated, {C}, kZeros, false);
  if (c.is_moe_block(index)) {
    moe_ = std::make_unique<MoeMlp>(p + "moe.", c, api, ps, params_, rows);
  } else {
    const int fc_parts = c.mlp == "swiglu" ? 2 : 1;  // SwiGLU stacks gate and up
    fc_w_ = &declare_param(ps, api, params_, p + "mlp.fc.w", Role::Column, {fc_out, C}, normal(c.init_std), true, fc_parts);
    fc_b_ = &declare_param(ps, api, params_, p + "mlp.fc.b", Role::Column, {fc_out}, kZeros, false, fc_parts);
    out_w_ = &declare_param(ps, api, params_, p + "mlp.proj.w", Role::Row, {C, F}, normal(resid_std), true);
    out_b_ = &declare_param(ps, api, params_, p + "mlp.proj.b", Role::Replicated, {C}, kZeros, false);
  }

  acts_.init([&c, rows] { return std::make_unique<Acts>(c, rows); });
  tmp_ = Tensor::empty({rows, C});
}

Block::~Block() = default;

void Block::use_slot(int k) {
  acts_.use(k);
  if (moe_) moe_->use_slot(k);
}

void Norm::forward(const loom_ops* o, NormActs& a, const Tensor& x, int64_t rows) const {
  const int64_t C = w->local_shape[0];
  if (b)
    o->layernorm_fwd(a.out.f32(), a.mean.f32(), a.rstd.f32(), x.f32(), w->value.f32(),
                     b->value.f32(), rows, C);
  else
    o->rmsnorm_fwd(a.out.f32(), a.rstd.f32(), x.f32(), w->value.f32(), rows, C);
}

void Norm::backward(const loom_ops* o, const NormActs& a, Tensor& dinp, const Tensor& dout,
                    const Tensor& x, int64_t rows) const {
  const int64_t C = w->local_shape[0];
  if (b)
    o->layernorm_bwd(dinp.f32(), w->grad.f32(), b->grad.f32(), dout.f32(), x.f32(),
                     w->value.f32(), a.mean.f32(), a.rstd.f32(), rows, C);
  else
    o->rmsnorm_bwd(dinp.f32(), w->grad.f32(), dout.f32(), x.f32(), w->value.f32(), a.rstd.f32(),
                   rows, C);
}

// x_mid = x + proj(attn(qkv(ln1(x))));  x_out = x_mid + mlp_proj(act(fc(ln2(x_mid))))
void Block::forward(const Microbatch& mb, Tensor& x) {
  const loom_ops* o = api_.ops();
  const int64_t n = x.dim(0), N = mb.rows(), C = c_.d_model;  // n: rows held here, N: all rows
  const int64_t heads = local_dim0(*qkv_w_) / (3 * c_.head_dim());
  Marks marks(api_.profile(), profiled_);
  Acts& a = *acts_;
  std::memcpy(a.x_in.data(), x.data(), n * C * sizeof(float));

  ln1_.forward(o, a.ln1, x, n);
  marks("fwd norm");
  Tensor h1 = api_.region_enter(rows_of(a.ln1.out, n));
  marks("fwd f (enter)");
  Tensor qkv = view(a.qkv, N, local_dim0(*qkv_w_)), att = view(a.att, N, proj_w_->local_shape[1]);
  Tensor y = view(tmp_, N, C);
  api_.linear(qkv, h1, *qkv_w_);
  o->bias_add(qkv.f32(), qkv_b_->value.f32(), N, local_dim0(*qkv_w_));
  marks("fwd qkv");
  o->attention_fwd(att.f32(), a.lse.f32(), qkv.f32(), mb.B, mb.T, heads, c_.head_dim());
  marks("fwd attention");
  api_.linear(y, att, *proj_w_);
  marks("fwd proj");
  Tensor y_out = api_.region_exit(y);
  marks("fwd g (exit)");
  o->bias_add(y_out.f32(), proj_b_->value.f32(), n, C);
  o->accumulate(x.f32(), y_out.f32(), n * C);
  std::memcpy(a.x_mid.data(), x.data(), n * C * sizeof(float));

  ln2_.forward(o, a.ln2, x, n);
  marks("fwd norm");
  if (moe_) {  // routed experts on full rows, the same on every tp rank: no region to enter or leave
    moe_->forward(rows_of(a.ln2.out, n), y);
    o->accumulate(x.f32(), y.f32(), n * C);
    marks("fwd moe");
    return;
  }
  Tensor h2 = api_.region_enter(rows_of(a.ln2.out, n));
  marks("fwd f (enter)");
  Tensor fc = view(a.fc, N, local_dim0(*fc_w_)), act = view(a.act, N, out_w_->local_shape[1]);
  api_.linear(fc, h2, *fc_w_);
  o->bias_add(fc.f32(), fc_b_->value.f32(), N, local_dim0(*fc_w_));
  if (c_.mlp == "swiglu")
    o->swiglu_fwd(act.f32(), fc.f32(), N, act.dim(1));
  else
    o->gelu_fwd(act.f32(), fc.f32(), N * act.dim(1));
  api_.linear(y, act, *out_w_);
  marks("fwd mlp");
  y_out = api_.region_exit(y);
  marks("fwd g (exit)");
  o->bias_add(y_out.f32(), out_b_->value.f32(), n, C);
  o->accumulate(x.f32(), y_out.f32(), n * C);
  marks("fwd residual");
}

// Scratch is sized for the full layer; views take this rank's (possibly sharded) widths.
void Block::backward(const Microbatch& mb, Tensor& dx) {
  const loom_ops* o = api_.ops();
  const int64_t n = dx.dim(0), C = c_.d_model;
  const Acts& a = *acts_;
  Tensor dnorm = rows_of(tmp_, n);
  Marks marks(api_.profile(), profiled_);
  if (moe_) {
    Tensor dh2 = view(s_.dh, n, C);
    moe_->backward(rows_of(a.ln2.out, n), dx, dh2, mb.dloss);
    marks("bwd moe");
    ln2_.backward(o, a.ln2, dnorm, dh2, rows_of(a.x_mid, n), n);
    o->accumulate(dx.f32(), dnorm.f32(), n * C);
    marks("bwd norm");
  } else {
    mlp_backward(mb, dx, dnorm, marks);
  }
  attention_backward(mb, dx, dnorm, marks);
}

// MLP branch: dx holds d(x_out); the residual passes it through unchanged.
void Block::mlp_backward(const Microbatch& mb, Tensor& dx, Tensor& dnorm, Marks& marks) {
  const loom_ops* o = api_.ops();
  const int64_t n = dx.dim(0), N = mb.rows(), C = c_.d_model;
  const Acts& a = *acts_;
  Tensor act = view(a.act, N, out_w_->local_shape[1]), fc = view(a.fc, N, local_dim0(*fc_w_));
  o->bias_bwd(out_b_->grad.f32(), dx.f32(), n, C);
  marks("bwd residual");
  Tensor dy = api_.region_exit_bwd(dx);
  marks("bwd g (exit)");
  Tensor dact = view(s_.dact, N, act.dim(1));
  api_.linear_bwd(&dact, dy, act, *out_w_);
  Tensor dfc = view(s_.dfc, N, fc.dim(1));
  if (c_.mlp == "swiglu")
    o->swiglu_bwd(dfc.f32(), fc.f32(), dact.f32(), N, act.dim(1));
  else
    o->gelu_bwd(dfc.f32(), fc.f32(), dact.f32(), N * act.dim(1));
  o->bias_bwd(fc_b_->grad.f32(), dfc.f32(), N, fc.dim(1));
  marks("bwd mlp");
  Tensor h2 = api_.region_enter(rows_of(a.ln2.out, n));  // sp gathers the rows again
  marks("bwd f (re-gather)");
  Tensor dh2 = view(s_.dh, N, C);
  api_.linear_bwd(&dh2, dfc, h2, *fc_w_);
  marks("bwd mlp");
  Tensor dh2_local = api_.region_enter_bwd(dh2);
  marks("bwd f (enter)");
  ln2_.backward(o, a.ln2, dnorm, dh2_local, rows_of(a.x_mid, n), n);
  o->accumulate(dx.f32(), dnorm.f32(), n * C);
  marks("bwd norm");
}

void Block::attention_backward(const Microbatch& mb, Tensor& dx, Tensor& dnorm, Marks& marks) {
  const loom_ops* o = api_.ops();
  const int64_t n = dx.dim(0), N = mb.rows(), C = c_.d_model;
  const int64_t heads = local_dim0(*qkv_w_) / (3 * c_.head_dim());
  const Acts& a = *acts_;
  Tensor dy;

  // Attention branch.
  o->bias_bwd(proj_b_->grad.f32(), dx.f32(), n, C);
  marks("bwd residual");
  dy = api_.region_exit_bwd(dx);
  marks("bwd g (exit)");
  Tensor att = view(a.att, N, proj_w_->local_shape[1]), qkv = view(a.qkv, N, local_dim0(*qkv_w_));
  Tensor datt = view(s_.datt, N, att.dim(1));
  api_.linear_bwd(&datt, dy, att, *proj_w_);
  marks("bwd proj");
  Tensor dqkv = view(s_.dqkv, N, qkv.dim(1));
  o->attention_bwd(dqkv.f32(), datt.f32(), qkv.f32(), att.f32(), a.lse.f32(), mb.B, mb.T, heads,
                   c_.head_dim());
  marks("bwd attention");
  o->bias_bwd(qkv_b_->grad.f32(), dqkv.f32(), N, qkv.dim(1));
  Tensor h1 = api_.region_enter(rows_of(a.ln1.out, n));
  marks("bwd f (re-gather)");
  Tensor dh1 = view(s_.dh, N, C);
  api_.linear_bwd(&dh1, dqkv, h1, *qkv_w_);
  marks("bwd qkv");
  Tensor dh1_local = api_.region_enter_bwd(dh1);
  marks("bwd f (enter)");
  ln1_.backward(o, a.ln1, dnorm, dh1_local, rows_of(a.x_in, n), n);
  o->accumulate(dx.f32(), dnorm.f32(), n * C);
  marks("bwd norm");
}

// Saved: x_in, x_mid and both norm outputs on the rows held here (n), norm statistics, and on all
// rows (N) this rank's share of qkv, attention output, log-sum-exp, MLP pre-activation and
// activation. Sequence parallelism shrinks the first group by tp; tensor parallelism the second.
int64_t Block::saved_bytes(const Microbatch& mb) const {
  const int64_t N = mb.rows(), n = api_.local_rows(N), C = c_.d_model;
  const int64_t stats = ln1_.b ? 4 * n : 2 * n;
  const int64_t heads = local_dim0(*qkv_w_) / (3 * c_.head_dim());
  const int64_t attention = 4 * (4 * n * C + stats + N * (local_dim0(*qkv_w_) + proj_w_->local_shape[1] + heads));
  if (moe_) return attention + moe_->saved_bytes(N);
  return attention + 4 * N * (local_dim0(*fc_w_) + out_w_->local_shape[1]);
}

// ---- head -------------------------------------------------------------------------------------

Head::Head(const GptConfig& c, LayerApi& api, ParamStore& ps, Param* tied_wte, int64_t rows)
    : c_(c), api_(api) {
  const int64_t C = c.d_model;
  norm_.w = &declare_param(ps, api, params_, "ln_f.w", Role::Replicated, {C}, kOnes, false);
  if (c.norm == "layernorm")
    norm_.b = &declare_param(ps, api, params_, "ln_f.b", Role::Replicated, {C}, kZeros, false);
  if (tied_wte) {
    params_.push_back(tied_wte);
    head_w_ = tied_wte;
  } else if (c.tied_embeddings) {  // the embedding is on another pipeline stage
    head_w_ = &declare_param(ps, api, params_, "wte", Role::Vocab, {vocab_rows(c, api), C},
                       normal(c.init_std), false);
    head_w_->mirror = true;
  } else {
    head_w_ = &declare_param(ps, api, params_, "lm_head.w", Role::Vocab, {vocab_rows(c, api), C},
                       normal(c.init_std), true);
  }
  const int64_t vocab_local = head_w_->local_shape[0];
  acts_.init([rows, C, vocab_local] { return std::make_unique<Acts>(rows, C, vocab_local); });
  dh_ = Tensor::empty({rows, C});
}

// logits = norm(x) W_head^T; loss_sum = sum over tokens of cross-entropy(logits, target).
// In training the logits buffer is overwritten by dloss * (softmax - onehot) in the same pass.
void Head::forward(const Microbatch& mb, Tensor& x) {
  const loom_ops* o = api_.ops();
  const int64_t n = x.dim(0), N = mb.rows(), C = c_.d_model;
  Acts& a = *acts_;
  std::memcpy(a.x_in.data(), x.data(), n * C * sizeof(float));
  Tensor logits = rows_of(a.logits, N);
  norm_.forward(o, a.norm, x, n);
  // The head is column-parallel over the vocabulary: f on the way in.
  Tensor h_full = api_.region_enter(rows_of(a.norm.out, n));
  api_.linear(logits, h_full, *head_w_);
  const int64_t vocab_begin = head_w_->slice.length >= 0 ? head_w_->slice.begin : 0;
  loss_sum_ = mb.targets ? api_.cross_entropy(logits, mb.targets, vocab_begin, c_.vocab_size, mb.dloss)
                         : 0.0;
}

int64_t Head::saved_bytes(const Microbatch& mb) const {
  const int64_t N = mb.rows(), n = api_.local_rows(N), C = c_.d_model;
  const int64_t full = n == N ? 0 : N * C;  // the gathered rows, under sequence parallelism
  return 4 * (2 * n * C + 2 * n + full + N * head_w_->local_shape[0]);
}

void Head::backward(const Microbatch& mb, Tensor& dx) {
  const loom_ops* o = api_.ops();
  const int64_t n = dx.dim(0), N = mb.rows(), C = c_.d_model;
  const Acts& a = *acts_;
  Tensor dlogits = rows_of(a.logits, N), dh = rows_of(dh_, N);
  Tensor h_full = api_.region_enter(rows_of(a.norm.out, n));  // sp gathers the rows again
  api_.linear_bwd(&dh, dlogits, h_full, *head_w_);
  Tensor dh_local = api_.region_enter_bwd(dh);
  norm_.backward(o, a.norm, dx, dh_local, rows_of(a.x_in, n), n);
}

}  // namespace loom::gpt
