#include "parallel/layer_api.hpp"

#include <cstring>
#include <vector>


namespace loom {

std::vector<float> LayerApi::logits_row(const Tensor& logits, int64_t row) const {
  const float* z = logits.f32() + row * logits.dim(1);
  return std::vector<float>(z, z + logits.dim(1));
}

Slice LayerApi::shard(Role, const std::vector<int64_t>&, int) const { return {}; }

// The precision slot sees three operands per linear layer, named after its weight: the weight
// itself, the activation "<W>.x" and, in backward, the output gradient "<W>.dy".
void LayerApi::linear(Tensor& y, const Tensor& x, const Param& W) const {
  int64_t N = x.dim(0), in = x.dim(-1), out = W.local_shape[0];
  Tensor xr = numerics_.operand(x, W.name + ".x", LOOM_OPERAND_ACTIVATION);
  Tensor wr = numerics_.operand(W.value, W.name, LOOM_OPERAND_WEIGHT);
  ops_->gemm(0, 1, N, out, in, 1.f, xr.f32(), in, wr.f32(), in, 0.f, y.f32(), out);
}

void LayerApi::linear_bwd(Tensor* dx, const Tensor& dy, const Tensor& x, Param& W, bool accumulate) const {
  int64_t N = x.dim(0), in = x.dim(-1), out = W.local_shape[0];
  Tensor dyr = numerics_.operand(dy, W.name + ".dy", LOOM_OPERAND_GRADIENT);
  if (dx && dx->defined()) {
    Tensor wr = numerics_.operand(W.value, W.name, LOOM_OPERAND_WEIGHT);
    ops_->gemm(0, 0, N, in, out, 1.f, dyr.f32(), out, wr.f32(), in, accumulate ? 1.f : 0.f, dx->f32(), in);
  }
  Tensor xr = numerics_.operand(x, W.name + ".x", LOOM_OPERAND_ACTIVATION);
  ops_->gemm(1, 0, out, in, N, 1.f, dyr.f32(), out, xr.f32(), in, 1.f, W.grad.f32(), in);
}

void LayerApi::embedding(Tensor& out, const int32_t* tokens, int64_t B, int64_t T,
                         const Param& wte, const Param* wpe) const {
  ops_->embedding_fwd(out.f32(), tokens, wte.value.f32(), wpe ? wpe->value.f32() : nullptr, B, T,
                      wte.local_shape[1]);
}

void LayerApi::embedding_bwd(const Tensor& dout, const int32_t* tokens, int64_t B, int64_t T,
                             Param& wte, Param* wpe) const {
  ops_->embedding_bwd(wte.grad.f32(), wpe ? wpe->grad.f32() : nullptr, dout.f32(), tokens, B, T,
                      wte.local_shape[1]);
}

double LayerApi::cross_entropy(Tensor& logits, const int32_t* targets, int64_t,
                               int64_t vocab_real, float dloss) const {
  int64_t N = logits.dim(0), V = logits.dim(1);
  std::vector<float> losses(N);
  ops_->softmax_xent(logits.f32(), losses.data(), targets, N, V, vocab_real, dloss);
  double sum = 0;
  for (float l : losses) sum += l;
  return sum;
}

std::vector<double> LayerApi::gather_over_tokens(const std::vector<double>& mine, int& my_rank) const {
  if (!tokens_on_ || tokens_.size == 1 || !tokens_.all_gather) {
    my_rank = 0;
    return mine;
  }
  my_rank = tokens_.rank;
  std::vector<double> all(mine.size() * tokens_.size);
  tokens_.all_gather(mine.data(), all.data(), static_cast<int64_t>(mine.size()));
  return all;
}

}  // namespace loom
