#include "parallel/layer_api.hpp"

#include <cstring>
#include <vector>

#include "core/errors.hpp"
#include "parallel/context_attention.hpp"

namespace loom {

std::vector<float> LayerApi::logits_row(const Tensor& logits, int64_t row) const {
  std::vector<float> z(static_cast<size_t>(logits.dim(1)));
  copy_bytes(z.data(), logits.f32() + row * logits.dim(1), z.size() * sizeof(float));
  return z;
}

Slice LayerApi::shard(Role, const std::vector<int64_t>&, int) const { return {}; }

void GemmNumerics::store(const Tensor& t, const std::string& site, loom_operand_role role,
                         Tensor& dst) const {
  if (!precision) throw RuntimeError("storing GEMM operand '" + site + "': no precision slot");
  precision->store(t, site, role, dst);
}

// The precision slot sees three operands per linear layer, named after its weight: the weight
// itself, the activation "<W>.x" and, in backward, the output gradient "<W>.dy".
void LayerApi::linear(Tensor& y, const Tensor& x, const Param& W) const {
  int64_t N = x.dim(0), in = x.dim(-1), out = W.local_shape[0];
  Tensor xr = numerics_.operand(x, W.name + ".x", LOOM_OPERAND_ACTIVATION);
  Tensor wr = numerics_.operand(W.value, W.name, LOOM_OPERAND_WEIGHT);
  operand_gemm(*ops_, 0, 1, N, out, in, 1.f, xr, in, wr, in, 0.f, y.f32(), out);
}

void LayerApi::linear_bwd(Tensor* dx, const Tensor& dy, const Tensor& x, Param& W,
                          bool accumulate) const {
  const Tensor dyr = numerics_.operand(dy, W.name + ".dy", LOOM_OPERAND_GRADIENT);
  if (dx && dx->defined()) input_grad(*dx, dyr, W, accumulate);
  add_weight_grad(dyr, x, W);
}

// dx[N, in] (+)= dy W over the rounded gradient dyr[N, out].
void LayerApi::input_grad(Tensor& dx, const Tensor& dyr, const Param& W, bool accumulate) const {
  const int64_t N = dyr.dim(0), in = W.local_shape[1], out = W.local_shape[0];
  const Tensor wr = numerics_.operand(W.value, W.name, LOOM_OPERAND_WEIGHT);
  operand_gemm(*ops_, 0, 0, N, in, out, 1.f, dyr, out, wr, in, accumulate ? 1.f : 0.f, dx.f32(),
               in);
}

// dW += dyr^T x, now or set aside (a split backward's W, or tp overlap's collective).
void LayerApi::add_weight_grad(const Tensor& dyr, const Tensor& x, Param& W) const {
  const Tensor xr = numerics_.operand(x, W.name + ".x", LOOM_OPERAND_ACTIVATION);
  DeferredWeightGrads* into = deferred_ ? deferred_ : overlap_ ? &overlapped_ : nullptr;
  if (!into) return weight_grad({&W, dyr, xr});
  into->add(W, dyr, xr);
}

void LayerApi::flush_weight_grads() {
  for (const DeferredWeightGrad& d : overlapped_) weight_grad(d);
  overlapped_.clear();
}

void DeferredWeightGrads::add(Param& W, const Tensor& dy, const Tensor& x) {
  if (used_ == items_.size()) items_.emplace_back();
  DeferredWeightGrad& d = items_[used_++];
  auto refill = [this](Tensor& into, const Tensor& from) {
    if (!copies_) return void(into = from);
    if (!into.defined() || into.shape() != from.shape() || into.dtype() != from.dtype())
      into = Tensor::empty(from.shape(), from.dtype());
    copy_bytes(into.data(), from.data(), from.bytes());
  };
  d.W = &W;
  refill(d.dy, dy);
  refill(d.x, x);
}

int64_t DeferredWeightGrads::bytes() const {
  int64_t n = 0;
  for (const DeferredWeightGrad& d : *this) n += static_cast<int64_t>(d.dy.bytes() + d.x.bytes());
  return n;
}

void LayerApi::weight_grad(const DeferredWeightGrad& d) const {
  const int64_t N = d.x.dim(0), in = d.x.dim(-1), out = d.W->local_shape[0];
  operand_gemm(*ops_, 1, 0, out, in, N, 1.f, d.dy, out, d.x, in, 1.f, d.W->grad.f32(), in);
}

int64_t LayerApi::position(int64_t t) const {
  return context_ ? context_->position(t) : offset_ + t;
}

void LayerApi::attention(const loom_attention_args& a) const {
  if (context_) return context_->forward(a);
  ops_->attention_gqa_fwd(a.out, a.lse, a.q, a.k, a.v, a.ldq, a.ldkv, a.B, a.T, a.H, a.Hkv, a.D);
}

void LayerApi::attention_bwd(const loom_attention_args& a) const {
  if (context_) return context_->backward(a);
  ops_->attention_gqa_bwd(a.dq, a.dk, a.dv, a.dout, a.q, a.k, a.v, a.out, a.lse, a.ldq, a.ldkv, a.B,
                          a.T, a.H, a.Hkv, a.D);
}

// Under cp a sequence's local rows are runs of consecutive positions: one call per run.
void LayerApi::rope(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
                    const float* cos, const float* sin, bool inverse) const {
  auto op = inverse ? ops_->rope_bwd : ops_->rope_fwd;
  if (!context_) return op(x, ld, B, T, heads, D, cos, sin, offset_);
  for (int64_t b = 0; b < B; ++b)
    for (const PositionRun& r : context_->runs())
      op(x + (b * T + r.local) * ld, ld, 1, r.length, heads, D, cos, sin, r.global);
}

// Learned positions under cp: the table rows of each local row's global position.
void LayerApi::embedding(Tensor& out, const int32_t* tokens, int64_t B, int64_t T, const Param& wte,
                         const Param* wpe) const {
  const int64_t C = wte.local_shape[1];
  const bool here = wpe && !context_ && offset_ == 0;
  ops_->embedding_fwd(out.f32(), tokens, wte.value.f32(), here ? wpe->value.f32() : nullptr, B, T,
                      C);
  if (!wpe || here) return;
  add_positions(out.f32(), wpe->value.f32(), B * T, 0, T, C);
}

// Where the host reaches the memory a loop does it (a kernel launch per row of C would cost an
// OpenMP fork each); elsewhere the op table's accumulate, row by row: the same sums either way.
void LayerApi::add_positions(float* rows, const float* table, int64_t n, int64_t first, int64_t T,
                             int64_t C) const {
  for (int64_t i = 0; i < n; ++i) {
    float* y = rows + i * C;
    const float* x = table + position((first + i) % T) * C;
    if (!ops_->host_reachable) {
      ops_->accumulate(y, x, C);
      continue;
    }
    for (int64_t c = 0; c < C; ++c) y[c] += x[c];
  }
}

void LayerApi::add_to_positions(float* table, const float* rows, int64_t n, int64_t first,
                                int64_t T, int64_t C) const {
  for (int64_t i = 0; i < n; ++i) {
    float* y = table + position((first + i) % T) * C;
    const float* x = rows + i * C;
    if (!ops_->host_reachable) {
      ops_->accumulate(y, x, C);
      continue;
    }
    for (int64_t c = 0; c < C; ++c) y[c] += x[c];
  }
}

void LayerApi::embedding_bwd(const Tensor& dout, const int32_t* tokens, int64_t B, int64_t T,
                             Param& wte, Param* wpe) const {
  const int64_t C = wte.local_shape[1];
  const bool here = wpe && !context_ && offset_ == 0;
  ops_->embedding_bwd(wte.grad.f32(), here ? wpe->grad.f32() : nullptr, dout.f32(), tokens, B, T,
                      C);
  if (!wpe || here) return;
  add_to_positions(wpe->grad.f32(), dout.f32(), B * T, 0, T, C);
}

double LayerApi::cross_entropy(Tensor& logits, const int32_t* targets, int64_t, int64_t vocab_real,
                               float dloss) const {
  int64_t N = logits.dim(0), V = logits.dim(1);
  std::vector<float> losses(N);
  ops_->softmax_xent(logits.f32(), losses.data(), targets, N, V, vocab_real, dloss);
  double sum = 0;
  for (float l : losses) sum += l;
  return sum;
}

}  // namespace loom
