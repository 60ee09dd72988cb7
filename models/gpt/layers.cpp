#include "gpt/layers.hpp"

#include <cmath>
#include <cstring>

#include "core/errors.hpp"
#include "gpt/moe.hpp"
#include "ops/typed_ops.hpp"

namespace loom::gpt {

namespace {

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

// ---- embedding --------------------------------------------------------------------------------

// A learned position table has max_positions rows (a checkpoint's 1024 can train at T = 256);
// RoPE and "none" have no table.
Embedding::Embedding(const model::Config& c, LayerApi& api, ParamStore& ps) : api_(api) {
  wte_ = &declare_param(ps, api, params_, "wte", Role::Vocab, {vocab_rows(c, api), c.d_model},
                        normal(c.init_std), false);
  if (c.learned_positions())
    wpe_ = &declare_param(ps, api, params_, "wpe", Role::Replicated, {c.max_positions, c.d_model},
                          normal(c.init_std), false);
}

void Embedding::forward(const Microbatch& mb, Tensor& x) {
  api_.embedding(x, mb.tokens, mb.B, mb.T, *wte_, wpe_);
}

void Embedding::backward(const Microbatch& mb, Tensor& dx) {
  api_.embedding_bwd(dx, mb.tokens, mb.B, mb.T, *wte_, wpe_);
}

// ---- transformer block ------------------------------------------------------------------------

Block::Block(int index, const model::Config& c, LayerApi& api, ParamStore& ps, Scratch& scratch,
             int64_t rows, const RopeTables* rope, RecomputeScratch* recompute, bool profile)
    : name_("block" + std::to_string(index)),
      c_(c),
      api_(api),
      s_(scratch),
      rope_(rope),
      recompute_(c.is_moe_block(index) ? nullptr : recompute),
      profiled_(index == 0 && profile) {
  const int64_t C = c.d_model, F = c.d_ff, fc_out = c.fc_out();
  const std::string p = "h" + std::to_string(index) + ".";
  // Residual projections are scaled by 1/sqrt(2 L) so the residual stream's variance stays
  // bounded with depth (GPT-2).
  const float resid_std = c.init_std / std::sqrt(2.f * c.n_layer);
  for (auto [n, tag] : {std::pair{&ln1_, "ln1"}, std::pair{&ln2_, "ln2"}}) {
    n->rms = c.norm == "rmsnorm", n->eps = static_cast<float>(c.norm_eps);
    n->w = &declare_param(ps, api, params_, p + tag + ".w", Role::Replicated, {C}, kOnes, false);
    if (!n->rms && c.bias)
      n->b = &declare_param(ps, api, params_, p + tag + ".b", Role::Replicated, {C}, kZeros, false);
  }
  declare_attention(p, ps, resid_std);
  if (c.is_moe_block(index)) {
    moe_ = std::make_unique<MoeMlp>(p + "moe.", c, api, ps, params_, rows);
  } else {
    const int fc_parts = c.mlp == "swiglu" ? 2 : 1;  // SwiGLU stacks gate and up
    fc_w_ = &declare_param(ps, api, params_, p + "mlp.fc.w", Role::Column, {fc_out, C},
                           normal(c.init_std), true, fc_parts);
    if (c.bias)
      fc_b_ = &declare_param(ps, api, params_, p + "mlp.fc.b", Role::Column, {fc_out}, kZeros,
                             false, fc_parts);
    out_w_ = &declare_param(ps, api, params_, p + "mlp.proj.w", Role::Row, {C, F},
                            normal(resid_std), true);
    if (c.bias)
      out_b_ =
          &declare_param(ps, api, params_, p + "mlp.proj.b", Role::Replicated, {C}, kZeros, false);
  }

  // MoE blocks keep everything: a replay would route and exchange tokens again.
  if (recompute_) policy_ = c.recompute;
  dtypes_ = operand_dtypes(api);
  if (!moe_) s_.use_dfc(dtypes_.dfc);
  s_.use_dqkv(dtypes_.dqkv);
  if (dtypes_.bf16_residual && c.norm != "rmsnorm") ln1_.ones = ln2_.ones = s_.ones();
  if (recompute_)
    acts_.init([&c, rows, this] {
      return std::make_unique<Acts>(c, rows, policy_, recompute_->acts, dtypes_);
    });
  else
    acts_.init([&c, rows, this] { return std::make_unique<Acts>(c, rows, dtypes_); });
}

// Multi-head attention keeps GPT-2's fused QKV weight (three stacked matrices, tp splits each by
// head). Grouped-query attention has a q weight (H heads) and a kv weight (K and V stacked, Hkv
// heads each): tp splits query heads and key/value heads alike, so a rank holds whole groups.
void Block::declare_attention(const std::string& p, ParamStore& ps, float resid_std) {
  const model::Config& c = c_;
  const int64_t C = c.d_model, D = c.head_dim(), q_width = c.n_head * D,
                kv_width = 2 * c.kv_heads() * D;
  if (!c.grouped_query()) {
    qkv_w_ = &declare_param(ps, api_, params_, p + "attn.qkv.w", Role::Column, {3 * q_width, C},
                            normal(c.init_std), true, 3);
    if (c.qkv_bias())
      qkv_b_ = &declare_param(ps, api_, params_, p + "attn.qkv.b", Role::Column, {3 * q_width},
                              kZeros, false, 3);
    heads_ = kv_heads_ = local_dim0(*qkv_w_) / (3 * D);
  } else {
    q_w_ = &declare_param(ps, api_, params_, p + "attn.q.w", Role::Column, {q_width, C},
                          normal(c.init_std), true);
    if (c.qkv_bias())
      q_b_ =
          &declare_param(ps, api_, params_, p + "attn.q.b", Role::Column, {q_width}, kZeros, false);
    kv_w_ = &declare_param(ps, api_, params_, p + "attn.kv.w", Role::Column, {kv_width, C},
                           normal(c.init_std), true, 2);
    if (c.qkv_bias())
      kv_b_ = &declare_param(ps, api_, params_, p + "attn.kv.b", Role::Column, {kv_width}, kZeros,
                             false, 2);
    heads_ = local_dim0(*q_w_) / D, kv_heads_ = local_dim0(*kv_w_) / (2 * D);
  }
  proj_w_ = &declare_param(ps, api_, params_, p + "attn.proj.w", Role::Row, {C, q_width},
                           normal(resid_std), true);
  if (c.proj_bias())
    proj_b_ =
        &declare_param(ps, api_, params_, p + "attn.proj.b", Role::Replicated, {C}, kZeros, false);
}

Block::QkvRefs Block::qkv_refs(const Tensor& buf, int64_t N) const {
  const int64_t D = c_.head_dim(), hq = heads_ * D, hkv = kv_heads_ * D;
  const int32_t dtype = buf.dtype();
  const size_t size = dtype_size(buf.dtype());
  const auto* base = static_cast<const char*>(buf.data());
  auto at = [&](int64_t i) { return loom_cref{base + i * size, dtype, 0}; };
  if (qkv_w_) return {at(0), at(hq), at(2 * hq), 3 * hq, 3 * hq};
  return {at(0), at(N * hq), at(N * hq + hkv), hq, 2 * hkv};
}

Block::Qkv Block::qkv_layout(const Tensor& buf, int64_t N) const {
  buf.f32();  // an fp32 buffer: the saved activations are read, the scratch written
  const QkvRefs r = qkv_refs(buf, N);
  auto f32 = [](loom_cref c) { return static_cast<float*>(const_cast<void*>(c.data)); };
  return {f32(r.q), f32(r.k), f32(r.v), r.ldq, r.ldkv};
}

// kept = wide rounded to bf16 values, once: cast into kept where it is bf16, else rounded where
// it lies (kept is wide, fp32) when `rounds` (Precision::plain_bf16); a bf16 tensor in place
// already holds them.
void Block::keep_rounded(const Tensor& wide, Tensor& kept, bool rounds, int64_t count) const {
  const loom_ops_v2* o = api_.ops();
  if (wide.data() != kept.data())
    o->quantize_into(kept.data(), LOOM_BF16, wide.f32(), count, 1.f, nullptr, nullptr);
  else if (rounds && kept.dtype() == LOOM_F32)
    o->quantize(const_cast<float*>(wide.f32()), count, LOOM_BF16, 1.f, nullptr, nullptr);
}

// q, k, v = f(x) W^T (+ b), then q and k rotated by their positions (RoPE).
void Block::project_qkv(const Microbatch& mb, const Tensor& x, Tensor& buf) {
  const loom_ops_v2* o = api_.ops();
  const int64_t N = mb.rows(), D = c_.head_dim();
  const Qkv L = qkv_layout(buf, N);
  if (qkv_w_) {
    Tensor qkv = Tensor::borrow(L.q, {N, L.ldq});
    api_.enter_linears(x, {{&qkv, qkv_w_}});
    if (qkv_b_) o->bias_add(qkv.f32(), qkv_b_->value.f32(), N, L.ldq);
  } else {
    Tensor q = Tensor::borrow(L.q, {N, L.ldq}), kv = Tensor::borrow(L.k, {N, L.ldkv});
    api_.enter_linears(x, {{&q, q_w_}, {&kv, kv_w_}});
    if (q_b_) o->bias_add(q.f32(), q_b_->value.f32(), N, L.ldq);
    if (kv_b_) o->bias_add(kv.f32(), kv_b_->value.f32(), N, L.ldkv);
  }
  if (!rope_) return;
  api_.rope(L.q, L.ldq, mb.B, mb.T, heads_, D, rope_->cos.f32(), rope_->sin.f32(), false);
  api_.rope(L.k, L.ldkv, mb.B, mb.T, kv_heads_, D, rope_->cos.f32(), rope_->sin.f32(), false);
}

// From the gradients of the rotated q, k and v: un-rotate, bias gradients, and
// dh = dq W_q + dkv W_kv (one GEMM with the fused weight); the weights' gradients accumulate.
// dqkv is bf16 or holds bf16 values where dtypes_.dqkv or bf16_dqkv say so (the values the GEMMs
// take as operands, and the bias gradients' terms, as autocast's bf16 linear has them).
void Block::project_qkv_bwd(const Microbatch& mb, Tensor& dqkv, const Tensor& x, Tensor& dh) {
  const int64_t N = mb.rows(), D = c_.head_dim();
  if (rope_) {
    const Qkv L = qkv_layout(dqkv, N);
    api_.rope(L.q, L.ldq, mb.B, mb.T, heads_, D, rope_->cos.f32(), rope_->sin.f32(), true);
    api_.rope(L.k, L.ldkv, mb.B, mb.T, kv_heads_, D, rope_->cos.f32(), rope_->sin.f32(), true);
  }
  keep_rounded(dqkv, dqkv, dtypes_.bf16_dqkv, qkv_count(N));
  const QkvRefs R = qkv_refs(dqkv, N);
  auto rows = [&](loom_cref at, int64_t ld, Param* b) {  // and their bias's gradient
    if (b) ops::typed(api_.ops())->bias_bwd(b->grad.f32(), at, N, ld);
    return Tensor::borrow(const_cast<void*>(at.data), {N, ld}, dqkv.dtype());
  };
  if (qkv_w_) {
    Tensor dqkv_all = rows(R.q, R.ldq, qkv_b_);
    return api_.linears_bwd_regather(dh, x, {{&dqkv_all, qkv_w_}});
  }
  Tensor dq = rows(R.q, R.ldq, q_b_), dkv = rows(R.k, R.ldkv, kv_b_);
  api_.linears_bwd_regather(dh, x, {{&dq, q_w_}, {&dkv, kv_w_}});
}

Block::~Block() = default;

void Block::use_slot(int k) {
  acts_.use(k);
  if (moe_) moe_->use_slot(k);
}

// The new rows' keys and values join the cache; their queries attend to every cached position up
// to their own (the block kernel's causal mask by position).
void Block::attend_cached(const Microbatch& mb, const Qkv& L, Tensor& att) {
  const int64_t W = kv_heads_ * c_.head_dim(), first = kv_->length, T = mb.T;
  if (mb.B != 1 || first + T > kv_->k.dim(0))
    throw RuntimeError("generation: the key/value cache holds " + std::to_string(kv_->k.dim(0)) +
                       " positions of one sequence");
  for (int64_t t = 0; t < T; ++t) {
    copy_bytes(kv_->k.f32() + (first + t) * W, L.k + t * L.ldkv, W * sizeof(float));
    copy_bytes(kv_->v.f32() + (first + t) * W, L.v + t * L.ldkv, W * sizeof(float));
  }
  kv_->length = first + T;
  std::vector<int64_t> qpos(T);
  for (int64_t t = 0; t < T; ++t) qpos[t] = first + t;
  Tensor lse = Tensor::empty({heads_ * T});
  api_.ops()->attention_block_fwd(att.f32(), lse.f32(), L.q, kv_->k.f32(), kv_->v.f32(), L.ldq, W,
                                  1, T, kv_->length, heads_, kv_heads_, c_.head_dim(), qpos.data(),
                                  nullptr);
}

// q, k and v kept as dtypes_ says (rounded once), then att_out = attention(q, k, v): the
// device's typed entry reads bf16 ones as they are kept.
void Block::attend(const Microbatch& mb, Tensor& qkv_out, Tensor& att_out) {
  const loom_ops_v2* o = api_.ops();
  Acts& a = *acts_;
  const int64_t N = mb.rows(), D = c_.head_dim();
  const bool narrow = qkv_out.data() != a.qkv.data();
  if (kv_) {  // the cache reads fp32: rounded where the GEMMs wrote it
    keep_rounded(qkv_out, qkv_out, dtypes_.bf16_qkv, qkv_count(N));
    return attend_cached(mb, qkv_layout(qkv_out, N), att_out);
  }
  keep_rounded(qkv_out, a.qkv, dtypes_.bf16_qkv, qkv_count(N));
  if (!narrow) {
    const Qkv L = qkv_layout(a.qkv, N);
    return api_.attention({att_out.f32(), a.lse.f32(), L.q, L.k, L.v, L.ldq, L.ldkv, mb.B, mb.T,
                           heads_, kv_heads_, D, nullptr, nullptr, nullptr, nullptr});
  }
  const QkvRefs L = qkv_refs(a.qkv, N);
  ops::typed(o)->attention_fwd(loom_ref{att_out.f32(), LOOM_F32, 0}, a.lse.f32(), L.q, L.k, L.v,
                               L.ldq, L.ldkv, mb.B, mb.T, heads_, kv_heads_, D);
}

// x_mid = x + proj(attn(qkv(ln1(x))));  x_out = x_mid + mlp_proj(act(fc(ln2(x_mid))))
void Block::forward(const Microbatch& mb, Tensor& x) {
  const loom_ops_v2* o = api_.ops();
  const int64_t n = x.dim(0), N = mb.rows(), C = c_.d_model;  // n: rows held here, N: all rows
  Marks marks(api_.profile(), profiled_ && !replaying_);
  Acts& a = *acts_;
  norm_forward(ln1_, a.ln1, x, n);
  // A recomputing block keeps x_in exact for the replay, which rounds it (and x_mid) as it goes.
  const bool rounds = dtypes_.bf16_residual && (!recompute_ || replaying_);
  ln1_.keep_input(o, a.ln1, x, a.x_in, view(s_.rows, n, C), n, rounds);
  marks("fwd norm");
  Tensor att = view(a.att, N, proj_w_->local_shape[1]), y = view(s_.rows, N, C);
  // The attention writes fp32: into att, or into the backward's scratch when att is kept bf16.
  Tensor att_out = att.dtype() == LOOM_F32 ? att : view(s_.datt, N, att.dim(1));
  // The GEMMs write fp32: into qkv, or into the backward's scratch when qkv is kept bf16.
  Tensor qkv_out = a.qkv.dtype() == LOOM_F32 ? a.qkv : view(s_.dact, N, c_.qkv_width());
  project_qkv(mb, rows_of(a.ln1.out, n), qkv_out);  // f's gather and the GEMMs: one segment, as
  marks("fwd f (enter)");                           // tp overlap runs them interleaved
  attend(mb, qkv_out, att_out);
  keep_rounded(att_out, att, dtypes_.bf16_att, att.numel());
  marks("fwd attention");
  Tensor y_out = api_.linear_exit(y, att, *proj_w_);  // the proj GEMM is in the exit's segment:
  marks("fwd g (exit)");                              // tp overlap runs them interleaved
  if (proj_b_) o->bias_add(y_out.f32(), proj_b_->value.f32(), n, C);
  o->accumulate(x.f32(), y_out.f32(), n * C);
  norm_forward(ln2_, a.ln2, x, n);
  ln2_.keep_input(o, a.ln2, x, a.x_mid, view(s_.rows, n, C), n, rounds);
  marks("fwd norm");
  if (moe_) {  // routed experts on full rows, the same on every tp rank: no region to enter or
               // leave
    moe_->forward(rows_of(a.ln2.out, n), y, mb.T);
    o->accumulate(x.f32(), y.f32(), n * C);
    marks("fwd moe");
    return;
  }
  Tensor fc = view(a.fc, N, local_dim0(*fc_w_)), act = view(a.act, N, out_w_->local_shape[1]);
  // The GEMM writes fp32: into fc, or into the backward's scratch when fc is kept bf16 (dact's,
  // whose rows are as wide but for SwiGLU's).
  const Tensor& wide = c_.mlp == "swiglu" ? s_.dfc : s_.dact;
  Tensor fc_out = fc.dtype() == LOOM_F32 ? fc : view(wide, N, fc.dim(1));
  api_.enter_linears(rows_of(a.ln2.out, n), {{&fc_out, fc_w_}});
  marks("fwd f (enter)");
  if (fc_b_) o->bias_add(fc_out.f32(), fc_b_->value.f32(), N, fc.dim(1));
  keep_rounded(fc_out, fc, dtypes_.bf16_fc, fc.numel());
  store_activation(act, fc, N);
  marks("fwd mlp");
  y_out = api_.linear_exit(y, act, *out_w_);
  marks("fwd g (exit)");
  if (out_b_) o->bias_add(y_out.f32(), out_b_->value.f32(), n, C);
  o->accumulate(x.f32(), y_out.f32(), n * C);
  marks("fwd residual");
}

// A norm's output is stored narrow only when every GEMM after it takes it so and sp does not
// gather it (its collectives move fp32); MoE blocks keep theirs fp32 (the experts read ln2's).
ActDtypes Block::operand_dtypes(const LayerApi& api) const {
  auto all_bf16 = [&api](std::initializer_list<const Param*> readers) {
    for (const Param* W : readers)
      if (W && api.numerics().storage(W->name + ".x", LOOM_OPERAND_ACTIVATION) != LOOM_BF16)
        return false;
    return true;
  };
  ActDtypes d;
  if (moe_) return d;
  if (!api.region_gathers() && all_bf16({qkv_w_, q_w_, kv_w_}) && all_bf16({fc_w_}))
    d.norm_out = LOOM_BF16;
  if (all_bf16({out_w_})) d.act = LOOM_BF16;
  if (all_bf16({proj_w_})) d.att = LOOM_BF16;
  const GemmNumerics& num = api.numerics();
  auto plain = [&num](std::initializer_list<const Param*> readers,  // their operand sites
                      const char* site = ".x", loom_operand_role role = LOOM_OPERAND_ACTIVATION) {
    for (const Param* W : readers)
      if (W && !num.plain_bf16(W->name + site, role)) return false;
    return true;
  };
  d.bf16_fc = plain({out_w_});
  d.bf16_att = plain({proj_w_});
  d.bf16_qkv = !api.context() && plain({qkv_w_ ? qkv_w_ : q_w_});
  // Kept in 16 bits where the device narrows (quantize_into) and its typed kernels read bf16.
  auto reads_bf16 = [o = api.ops()](int op) { return device_reads_bf16(o, op); };
  if (d.bf16_fc && d.act == LOOM_BF16 && reads_bf16(LOOM_OP_ACTIVATION)) d.fc = LOOM_BF16;
  if (d.bf16_qkv && reads_bf16(LOOM_OP_ATTENTION)) d.qkv = LOOM_BF16;
  d.norm_writes =
      d.norm_out == LOOM_BF16 && plain({qkv_w_, q_w_, kv_w_, fc_w_}) && reads_bf16(LOOM_OP_NORM);
  // Under recomputation x_in and x_mid stay fp32 until backward's replay has read them, and are
  // rounded where they lie then (Block::recompute).
  d.bf16_residual = plain({qkv_w_, q_w_, kv_w_, fc_w_});
  if (d.bf16_residual && !recompute_ && reads_bf16(LOOM_OP_NORM)) d.residual = LOOM_BF16;
  d.bf16_dfc = d.bf16_fc && num.plain_bf16(fc_w_->name + ".dy", LOOM_OPERAND_GRADIENT);
  if (d.bf16_dfc && d.fc == LOOM_BF16 && c_.mlp != "swiglu" && (!fc_b_ || reads_bf16(LOOM_OP_BIAS)))
    d.dfc = LOOM_BF16;
  d.bf16_dqkv = d.bf16_qkv && !rope_ && plain({qkv_w_, q_w_, kv_w_}, ".dy", LOOM_OPERAND_GRADIENT);
  const bool qkv_bias = qkv_b_ || q_b_ || kv_b_;
  if (d.bf16_dqkv && d.qkv == LOOM_BF16 && (!qkv_bias || reads_bf16(LOOM_OP_BIAS)))
    d.dqkv = LOOM_BF16;
  return d;
}

void Block::norm_forward(const Norm& norm, NormActs& a, const Tensor& x, int64_t n) {
  const Param* reader = &a == &acts_->ln2 ? fc_w_ : qkv_w_ ? qkv_w_ : q_w_;
  // s_.rows is free until the next projection writes its output.
  norm_stored(api_, norm, a, x, n, s_.rows, *reader, dtypes_.norm_writes);
}

void Block::store_activation(Tensor& act, const Tensor& fc, int64_t N) {
  const int64_t F = act.dim(1);
  if (act.dtype() == LOOM_F32 || fc.dtype() == LOOM_BF16)
    return activation_fwd(api_.ops(), c_, act, fc, N, F);
  Tensor wide = view(s_.dact, N, F);  // scratch: nothing in it outlives this call
  activation_fwd(api_.ops(), c_, wide, fc, N, F);
  api_.numerics().store(wide, out_w_->name + ".x", LOOM_OPERAND_ACTIVATION, act);
}

// Scratch is sized for the full layer; views take this rank's (possibly sharded) widths.
void Block::backward(const Microbatch& mb, Tensor& dx) {
  const loom_ops_v2* o = api_.ops();
  const int64_t n = dx.dim(0), C = c_.d_model;
  if (recompute_) recompute(mb);
  const Acts& a = *acts_;
  Tensor dnorm = rows_of(s_.rows, n);
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
  const loom_ops_v2* o = api_.ops();
  const int64_t n = dx.dim(0), N = mb.rows(), C = c_.d_model;
  const Acts& a = *acts_;
  Tensor act = view(a.act, N, out_w_->local_shape[1]), fc = view(a.fc, N, local_dim0(*fc_w_));
  if (out_b_) o->bias_bwd(out_b_->grad.f32(), dx.f32(), n, C);
  marks("bwd residual");
  Tensor dact = view(s_.dact, N, act.dim(1));
  api_.exit_bwd_linear(dact, dx, act, *out_w_);
  marks("bwd g (exit)");
  Tensor dfc = view(s_.dfc, N, fc.dim(1));
  activation_bwd(o, c_, dfc, fc, dact.f32(), N, act.dim(1));
  keep_rounded(dfc, dfc, dtypes_.bf16_dfc, dfc.numel());
  if (fc_b_) ops::typed(o)->bias_bwd(fc_b_->grad.f32(), {dfc.data(), dfc.dtype(), 0}, N, fc.dim(1));
  marks("bwd mlp");
  Tensor dh2 = view(s_.dh, N, C);
  api_.linears_bwd_regather(dh2, rows_of(a.ln2.out, n),
                            {{&dfc, fc_w_}});  // sp gathers the rows again
  marks("bwd f (re-gather)");
  Tensor dh2_local = api_.region_enter_bwd(dh2);
  marks("bwd f (enter)");
  ln2_.backward(o, a.ln2, dnorm, dh2_local, rows_of(a.x_mid, n), n);
  o->accumulate(dx.f32(), dnorm.f32(), n * C);
  marks("bwd norm");
}

void Block::attention_backward(const Microbatch& mb, Tensor& dx, Tensor& dnorm, Marks& marks) {
  const loom_ops_v2* o = api_.ops();
  const int64_t n = dx.dim(0), N = mb.rows(), C = c_.d_model;
  const Acts& a = *acts_;

  if (proj_b_) o->bias_bwd(proj_b_->grad.f32(), dx.f32(), n, C);
  marks("bwd residual");
  Tensor att = view(a.att, N, proj_w_->local_shape[1]);
  Tensor datt = view(s_.datt, N, att.dim(1));
  api_.exit_bwd_linear(datt, dx, att, *proj_w_);
  marks("bwd g (exit)");
  // The attention's backward reads its output in fp32: a bf16 att widened into dnorm's buffer,
  // free until ln1's backward.
  Tensor out = att;
  if (att.dtype() != LOOM_F32) {
    out = view(s_.rows, N, att.dim(1));
    o->from_bf16(out.f32(), static_cast<const uint16_t*>(att.data()), att.numel());
  }
  if (a.qkv.dtype() == LOOM_F32) {
    const Qkv L = qkv_layout(a.qkv, N), dL = qkv_layout(s_.dqkv, N);
    api_.attention_bwd({out.f32(), const_cast<float*>(a.lse.f32()), L.q, L.k, L.v, L.ldq, L.ldkv,
                        mb.B, mb.T, heads_, kv_heads_, c_.head_dim(), datt.f32(), dL.q, dL.k,
                        dL.v});
  } else {
    const QkvRefs L = qkv_refs(a.qkv, N), dL = qkv_refs(s_.dqkv, N);  // dqkv: fp32 or bf16
    auto f32 = [](const float* p) { return loom_cref{p, LOOM_F32, 0}; };
    auto ref = [](loom_cref c) { return loom_ref{const_cast<void*>(c.data), c.dtype, 0}; };
    ops::typed(o)->attention_bwd(ref(dL.q), ref(dL.k), ref(dL.v), f32(datt.f32()), L.q, L.k, L.v,
                                 f32(out.f32()), a.lse.f32(), L.ldq, L.ldkv, mb.B, mb.T, heads_,
                                 kv_heads_, c_.head_dim());
  }
  marks("bwd attention");
  Tensor dh1 = view(s_.dh, N, C);
  project_qkv_bwd(mb, s_.dqkv, rows_of(a.ln1.out, n), dh1);
  marks("bwd f (re-gather)");
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
  const int64_t stats = ln1_.rms ? 2 * n : 4 * n;
  const int64_t qkv = (heads_ + 2 * kv_heads_) * c_.head_dim();
  auto size = [](loom_dtype d) { return static_cast<int64_t>(dtype_size(d)); };
  // The norms' outputs, the attention output and the MLP's tensors in their kept dtypes
  // (ActDtypes), the rest fp32.
  const int64_t norms = 2 * n * C * size(dtypes_.norm_out),
                act = moe_ ? 0 : N * out_w_->local_shape[1] * size(dtypes_.act);
  const int64_t attention = 2 * n * C * size(dtypes_.residual) + 4 * (stats + N * heads_) +
                            N * qkv * size(dtypes_.qkv) +
                            N * proj_w_->local_shape[1] * size(dtypes_.att) + norms;
  if (moe_) return attention + moe_->saved_bytes(N);
  const int64_t all = attention + N * local_dim0(*fc_w_) * size(dtypes_.fc) + act;
  // Recomputing blocks keep less; what they drop lives once in RecomputeScratch (Gpt counts it).
  if (policy_ == "full") return 4 * n * C;
  if (policy_ == "selective") return all - norms - act;
  return all;
}

}  // namespace loom::gpt
