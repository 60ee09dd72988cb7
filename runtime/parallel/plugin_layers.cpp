#include "parallel/plugin_layers.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "core/errors.hpp"
#include "loader/host.hpp"
#include "loader/services.hpp"

namespace loom {

using plugins::check;

namespace {

loom_role to_abi(Role r) {
  switch (r) {
    case Role::Column:
      return LOOM_ROLE_COLUMN;
    case Role::Row:
      return LOOM_ROLE_ROW;
    case Role::Vocab:
      return LOOM_ROLE_VOCAB;
    case Role::Replicated:
      return LOOM_ROLE_REPLICATED;
    case Role::Expert:
      return LOOM_ROLE_EXPERT;
  }
  return LOOM_ROLE_REPLICATED;
}

}  // namespace

PluginLayers::PluginLayers(const loom_ops_v2* ops, GemmNumerics numerics,
                           const loom_tensor_context& ctx, plugins::Instance& tensor,
                           plugins::Instance* sequence, Overlap overlap)
    : LayerApi(ops, numerics),
      ctx_(ctx),
      tensor_(tensor.table<loom_tensor_v2>()),
      tensor_self_(tensor.self()) {
  tp_ = ctx.comm->size(ctx.comm_self, ctx.tp);
  rank_ = ctx.comm->rank(ctx.comm_self, ctx.tp);
  overlap_ = overlap.on;
  chunks_ = std::max(1, overlap.chunks);
  loom_error e;
  loom_tensor_context own = ctx;  // each plugin gets the op table of the ABI it was built for
  own.ops = plugins::ops_for(tensor.desc(), ops);
  check(tensor_->setup(tensor_self_, &own, &e), e, "tensor plugin setup");
  if (sequence) {
    seq_ = sequence->table<loom_sequence_v2>();
    seq_self_ = sequence->self();
    own.ops = plugins::ops_for(sequence->desc(), ops);
    check(seq_->setup(seq_self_, &own, &e), e, "sequence plugin setup");
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

loom_work* PluginLayers::issue_sum(const Tensor& in, Tensor& out) {
  loom_tensor i = in.desc(), o = out.desc();
  loom_work* w = nullptr;
  loom_error e;
  if (seq_)
    check(ctx_.comm->reduce_scatter(ctx_.comm_self, ctx_.tp, &i, &o, LOOM_REDUCE_SUM, &w, &e), e,
          "tp overlap reduce-scatter");
  else
    check(ctx_.comm->all_reduce(ctx_.comm_self, ctx_.tp, &o, LOOM_REDUCE_SUM, &w, &e), e,
          "tp overlap all-reduce");
  return w;
}

void PluginLayers::wait(loom_work* w) {
  loom_error e;
  check(ctx_.comm->wait(ctx_.comm_self, w, &e), e, "tp overlap wait");
}

// Every handle is completed even when one fails; the first failure is rethrown.
void PluginLayers::wait_all(const std::vector<loom_work*>& works) {
  std::exception_ptr first;
  for (loom_work* w : works) {
    try {
      wait(w);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

// f backward: all-reduce (tp) or reduce-scatter (sp). With overlap the layer's weight-gradient
// GEMMs, set aside by linear_bwd, run while it is in flight: Megatron's overlap of the input
// gradient's collective with the weight gradients (Narayanan et al. 2021, 4.2).
Tensor PluginLayers::region_enter_bwd(const Tensor& dh) {
  if (overlap_) {
    Tensor out = seq_ ? Tensor::empty({dh.dim(0) / tp_, dh.dim(1)}) : dh;
    loom_work* w = issue_sum(dh, out);
    try {
      flush_weight_grads();
    } catch (...) {
      wait(w);  // no handle outlives the layer
      throw;
    }
    wait(w);
    profile_.collective(dh.bytes());
    return out;
  }
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

// y = x W^T in row chunks, each chunk's g collective issued as soon as its rows are done and
// waited for at the end: every collective but the last chunk's runs behind a GEMM. Under sp a
// chunk is the same rows of every rank's block ([r n + c0, r n + c1) for rank r), staged
// contiguously so that one reduce-scatter leaves rows [c0, c1) of this rank's block here.
Tensor PluginLayers::linear_exit(Tensor& y, const Tensor& x, const Param& W) {
  const int64_t N = x.dim(0), in = x.dim(-1), out = W.local_shape[0], n = seq_ ? N / tp_ : N;
  const int k = static_cast<int>(std::min<int64_t>(chunks_, n));
  if (!overlap_ || k < 2) return LayerApi::linear_exit(y, x, W);
  const Tensor xr = numerics_.operand(x, W.name + ".x", LOOM_OPERAND_ACTIVATION);
  const Tensor wr = numerics_.operand(W.value, W.name, LOOM_OPERAND_WEIGHT);
  const int parts = seq_ ? tp_ : 1;
  Tensor result = seq_ ? Tensor::empty({n, out}) : y;
  Tensor staged = seq_ ? Tensor::empty({N, out}) : y;  // chunk c: rows [parts c0, parts c1)
  std::vector<loom_work*> works;
  try {
    for (int c = 0; c < k; ++c) {
      const int64_t c0 = c * n / k, c1 = (c + 1) * n / k, rows = c1 - c0;
      float* stage = staged.f32() + (seq_ ? parts * c0 : c0) * out;
      for (int r = 0; r < parts; ++r)
        operand_gemm(*ops_, 0, 1, rows, out, in, 1.f, xr.rows(r * n + c0, r * n + c1), in, wr, in,
                     0.f, stage + r * rows * out, out);
      Tensor chunk_in = Tensor::borrow(stage, {parts * rows, out});
      Tensor chunk_out = result.rows(c0, c1);
      works.push_back(issue_sum(chunk_in, chunk_out));
    }
  } catch (...) {
    wait_all(works);
    throw;
  }
  wait_all(works);
  profile_.collective(staged.bytes());
  return result;
}

// Under sp with overlap (the collective matmul's forward): chunk c, rows [c0, c1) of every rank's
// block, is all-gathered rank-major while chunk c - 1's GEMMs run; each rank's rows of it land at
// rows [r n + c0, r n + c1) of every output. The precision slot rounds operands over whole
// tensors (fp8 scales by their amax), so only exact operands take the chunks.
bool PluginLayers::chunked_gathers() const {
  return overlap_ && seq_ && (!numerics_.precision || numerics_.precision->exact());
}

loom_work* PluginLayers::issue_gather(const Tensor& local, int64_t c0, int64_t c1, Tensor& staged) {
  staged = Tensor::empty({tp_ * (c1 - c0), local.dim(1)});
  loom_tensor in = local.rows(c0, c1).desc(), out = staged.desc();
  loom_work* w = nullptr;
  loom_error e;
  check(ctx_.comm->all_gather(ctx_.comm_self, ctx_.tp, &in, &out, &w, &e), e,
        "tp overlap all-gather");
  return w;
}

template <class Use>
void PluginLayers::gather_in_chunks(const Tensor& local, int k, Use use) {
  const int64_t n = local.dim(0);
  std::vector<Tensor> staged(k);
  std::vector<loom_work*> works(k, nullptr);
  auto first = [&](int c) { return c * n / k; };
  try {
    works[0] = issue_gather(local, first(0), first(1), staged[0]);
    for (int c = 0; c < k; ++c) {
      if (c + 1 < k) works[c + 1] = issue_gather(local, first(c + 1), first(c + 2), staged[c + 1]);
      loom_work* w = works[c];
      works[c] = nullptr;
      wait(w);
      use(staged[c], first(c), first(c + 1));
    }
  } catch (...) {
    std::vector<loom_work*> left;
    for (loom_work* w : works)
      if (w) left.push_back(w);
    wait_all(left);
    throw;
  }
}

void PluginLayers::enter_linears(const Tensor& x, std::initializer_list<LinearOut> outs) {
  const int64_t n = x.dim(0), C = x.dim(1);
  const int k = static_cast<int>(std::min<int64_t>(chunks_, n));
  if (!chunked_gathers() || k < 2) return LayerApi::enter_linears(x, outs);
  gather_in_chunks(x, k, [&](const Tensor& staged, int64_t c0, int64_t c1) {
    for (const LinearOut& o : outs) {
      const int64_t out = o.W->local_shape[0];
      for (int r = 0; r < tp_; ++r)
        ops_->gemm(0, 1, c1 - c0, out, C, 1.f, staged.f32() + r * (c1 - c0) * C, C,
                   o.W->value.f32(), C, 0.f, o.y->f32() + (r * n + c0) * out, out);
    }
  });
  profile_.collective(x.bytes() * tp_);
}

// g's backward under sp with overlap: dy's chunk c + 1 gathers while chunk c's rows of dx = dy W
// are computed; the chunks are also laid into the whole dy, which the weight gradient needs.
void PluginLayers::exit_bwd_linear(Tensor& dx, const Tensor& dy_local, const Tensor& x, Param& W) {
  const int64_t n = dy_local.dim(0), out = dy_local.dim(1), in = W.local_shape[1];
  const int k = static_cast<int>(std::min<int64_t>(chunks_, n));
  if (!chunked_gathers() || k < 2) return LayerApi::exit_bwd_linear(dx, dy_local, x, W);
  Tensor dy = Tensor::empty({n * tp_, out});
  gather_in_chunks(dy_local, k, [&](const Tensor& staged, int64_t c0, int64_t c1) {
    for (int r = 0; r < tp_; ++r) {
      const float* piece = staged.f32() + r * (c1 - c0) * out;
      copy_bytes(dy.f32() + (r * n + c0) * out, piece, (c1 - c0) * out * sizeof(float));
      ops_->gemm(0, 0, c1 - c0, in, out, 1.f, piece, out, W.value.f32(), in, 0.f,
                 dx.f32() + (r * n + c0) * in, in);
    }
  });
  profile_.collective(dy.bytes());
  add_weight_grad(dy, x, W);
}

// The gather of f's input again, behind the dx GEMMs (which read only dy and W); the weight
// gradients, which read the gathered rows, after it.
void PluginLayers::linears_bwd_regather(Tensor& dx, const Tensor& x_local,
                                        std::initializer_list<LinearGrad> grads) {
  if (!overlap_ || !seq_) return LayerApi::linears_bwd_regather(dx, x_local, grads);
  Tensor h;
  loom_work* w = issue_gather(x_local, 0, x_local.dim(0), h);  // all rows: rank-major is row order
  std::vector<Tensor> rounded;
  try {
    bool first = true;
    for (const LinearGrad& g : grads) {
      rounded.push_back(numerics_.operand(*g.dy, g.W->name + ".dy", LOOM_OPERAND_GRADIENT));
      input_grad(dx, rounded.back(), *g.W, !first);
      first = false;
    }
  } catch (...) {
    wait_all({w});
    throw;
  }
  wait(w);
  profile_.collective(h.bytes());
  size_t i = 0;
  for (const LinearGrad& g : grads) add_weight_grad(rounded[i++], h, *g.W);
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
  copy_bytes(out.data(), x.data(), rows * C * sizeof(float));
  if (!wpe) return;
  add_positions(out.f32(), wpe->value.f32(), rows, first, T, C);
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
  add_to_positions(wpe->grad.f32(), dout.f32(), rows, first, T, C);
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
  check(ctx_.comm->all_gather(ctx_.comm_self, ctx_.tp, &in, &out, nullptr, &e), e,
        "tp logits gather");
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
