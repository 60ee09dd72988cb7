#include "parallel/plugin_layers.hpp"

#include <cstring>

#include "core/errors.hpp"
#include "loader/host.hpp"

namespace loom {

using plugins::check;

namespace {

loom_role to_abi(Role r) {
  switch (r) {
    case Role::Column: return LOOM_ROLE_COLUMN;
    case Role::Row: return LOOM_ROLE_ROW;
    case Role::Vocab: return LOOM_ROLE_VOCAB;
    case Role::Replicated: return LOOM_ROLE_REPLICATED;
    case Role::Expert: return LOOM_ROLE_EXPERT;
  }
  return LOOM_ROLE_REPLICATED;
}

}  // namespace

PluginLayers::PluginLayers(const loom_ops* ops, GemmNumerics numerics,
                           const loom_tensor_context& ctx, plugins::Instance& tensor,
                           plugins::Instance* sequence)
    : LayerApi(ops, numerics),
      ctx_(ctx),
      tensor_(tensor.table<loom_tensor_v2>()),
      tensor_self_(tensor.self()) {
  tp_ = ctx.comm->size(ctx.comm_self, ctx.tp);
  rank_ = ctx.comm->rank(ctx.comm_self, ctx.tp);
  loom_error e;
  check(tensor_->setup(tensor_self_, &ctx, &e), e, "tensor plugin setup");
  if (sequence) {
    seq_ = sequence->table<loom_sequence_v2>();
    seq_self_ = sequence->self();
    check(seq_->setup(seq_self_, &ctx, &e), e, "sequence plugin setup");
  }
}

Slice PluginLayers::shard(Role role, const std::vector<int64_t>& shape, int fused) const {
  loom_slice out{};
  loom_error e;
  check(tensor_->shard(tensor_self_, to_abi(role), static_cast<int32_t>(shape.size()), shape.data(),
                       fused, &out, &e),
        e, "tensor plugin shard");
  Slice s;
  s.dim = out.dim;
  s.begin = out.begin;
  s.length = out.length;
  s.fused = out.fused;
  return s;
}

Tensor PluginLayers::gather(const Tensor& local) const {
  Tensor full = Tensor::empty({local.dim(0) * tp_, local.dim(1)});
  loom_tensor l = local.desc(), f = full.desc();
  loom_error e;
  check(seq_->gather(seq_self_, &l, &f, &e), e, "sp gather");
  profile_.collective(full.bytes());
  return full;
}

Tensor PluginLayers::scatter(const Tensor& full) const {
  Tensor local = Tensor::empty({full.dim(0) / tp_, full.dim(1)});
  loom_tensor f = full.desc(), l = local.desc();
  loom_error e;
  check(seq_->scatter(seq_self_, &f, &l, &e), e, "sp scatter");
  profile_.collective(full.bytes());
  return local;
}

// f: identity forward (tp) or all-gather of the rows (sp).
Tensor PluginLayers::region_enter(const Tensor& h) { return seq_ ? gather(h) : h; }

// f backward: all-reduce (tp) or reduce-scatter (sp).
Tensor PluginLayers::region_enter_bwd(const Tensor& dh) {
  if (seq_) return scatter(dh);
  loom_tensor d = dh.desc();
  loom_error e;
  check(tensor_->enter_bwd(tensor_self_, &d, &e), e, "tp f backward");
  profile_.collective(dh.bytes());
  return dh;
}

// g: all-reduce (tp) or reduce-scatter (sp).
Tensor PluginLayers::region_exit(const Tensor& y) {
  if (seq_) return scatter(y);
  loom_tensor d = y.desc();
  loom_error e;
  check(tensor_->exit_fwd(tensor_self_, &d, &e), e, "tp g forward");
  profile_.collective(y.bytes());
  return y;
}

// g backward: identity (tp) or all-gather (sp).
Tensor PluginLayers::region_exit_bwd(const Tensor& dy) { return seq_ ? gather(dy) : dy; }

// x = g(masked lookup in this rank's vocabulary rows) + wpe at each local row's position.
void PluginLayers::embedding(Tensor& out, const int32_t* tokens, int64_t B, int64_t T,
                             const Param& wte, const Param* wpe) const {
  const int64_t N = B * T, C = wte.local_shape[1], V = wte.local_shape[0];
  Tensor partial = Tensor::empty({N, C});
  loom_error e;
  check(tensor_->embedding_fwd(tensor_self_, partial.f32(), tokens, N, wte.value.f32(),
                               wte.slice.length >= 0 ? wte.slice.begin : 0, V, C, &e),
        e, "tp embedding");
  Tensor x = const_cast<PluginLayers*>(this)->region_exit(partial);
  const int64_t rows = x.dim(0), first = first_row(N);
  std::memcpy(out.data(), x.data(), rows * C * sizeof(float));
  if (!wpe) return;
  float* o = out.f32();
  const float* p = wpe->value.f32();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < C; ++c) o[i * C + c] += p[position((first + i) % T) * C + c];
}

void PluginLayers::embedding_bwd(const Tensor& dout, const int32_t* tokens, int64_t B, int64_t T,
                                 Param& wte, Param* wpe) const {
  const int64_t N = B * T, C = wte.local_shape[1], V = wte.local_shape[0];
  Tensor full = const_cast<PluginLayers*>(this)->region_exit_bwd(dout);
  loom_error e;
  check(tensor_->embedding_bwd(tensor_self_, wte.grad.f32(), full.f32(), tokens, N,
                               wte.slice.length >= 0 ? wte.slice.begin : 0, V, C, &e),
        e, "tp embedding backward");
  if (!wpe) return;
  const int64_t rows = dout.dim(0), first = first_row(N);
  const float* d = dout.f32();
  float* g = wpe->grad.f32();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < C; ++c) g[position((first + i) % T) * C + c] += d[i * C + c];
}

double PluginLayers::cross_entropy(Tensor& logits, const int32_t* targets, int64_t vocab_begin,
                                   int64_t vocab_real, float dloss) const {
  double loss = 0;
  loom_error e;
  check(tensor_->cross_entropy(tensor_self_, logits.f32(), targets, logits.dim(0), vocab_begin,
                               logits.dim(1), vocab_real, dloss, &loss, &e),
        e, "tp cross-entropy");
  return loss;
}

std::vector<float> PluginLayers::logits_row(const Tensor& logits, int64_t row) const {
  const int64_t V = logits.dim(1);
  std::vector<float> full(V * tp_);
  loom_tensor in = flat_view(const_cast<float*>(logits.f32()) + row * V, LOOM_F32, V);
  loom_tensor out = flat_view(full.data(), LOOM_F32, V * tp_);
  loom_error e;
  check(ctx_.comm->all_gather(ctx_.comm_self, ctx_.tp, &in, &out, nullptr, &e), e, "tp logits gather");
  return full;
}

// Under sp, norms and the biases after row-parallel layers saw only this rank's rows.
void PluginLayers::finish_replicated_grads(const std::vector<Param*>& params) {
  if (!seq_) return;
  for (Param* p : params) {
    if (p->tp_sharded()) continue;
    loom_tensor g = p->grad.desc();
    loom_error e;
    check(seq_->reduce_replicated(seq_self_, &g, &e), e, "sp replicated gradients");
  }
}

}  // namespace loom
