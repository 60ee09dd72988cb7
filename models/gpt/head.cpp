#include "gpt/layers.hpp"

namespace loom::gpt {

// In a bf16 run the norm's output is the head GEMM's operand, stored in its dtype where sp does
// not gather it (its collectives move fp32), and x_in holds bf16 values as a block's x_in does
// (Norm::keep_input): in 16 bits where the device's norms read bf16.
Head::Acts::Acts(int64_t rows, int64_t C, int64_t vocab_local, loom_dtype norm_out,
                 loom_dtype residual)
    : x_in(Tensor::empty({rows, C}, residual)),
      logits(Tensor::empty({rows, vocab_local})),
      norm(rows, C) {
  if (norm_out != LOOM_F32) norm.out = Tensor::empty({rows, C}, norm_out);
}

Head::Head(const model::Config& c, LayerApi& api, ParamStore& ps, Param* tied_wte, Scratch& s,
           int64_t rows)
    : c_(c), api_(api), dh_(s.dh) {
  const int64_t C = c.d_model;
  norm_.rms = c.norm == "rmsnorm", norm_.eps = static_cast<float>(c.norm_eps);
  norm_.w = &declare_param(ps, api, params_, "ln_f.w", Role::Replicated, {C}, kOnes, false);
  if (!norm_.rms && c.bias)
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
  const std::string site = head_w_->name + ".x";
  const loom_dtype norm_out =
      api.region_gathers() ? LOOM_F32 : api.numerics().storage(site, LOOM_OPERAND_ACTIVATION);
  bf16_residual_ = api.numerics().plain_bf16(site, LOOM_OPERAND_ACTIVATION);
  // The device's norms read and write bf16: the input is kept, and the output written, in 16 bits.
  norm_writes_ = bf16_residual_ && device_reads_bf16(api.ops(), LOOM_OP_NORM);
  const loom_dtype residual = norm_writes_ ? LOOM_BF16 : LOOM_F32;
  if (bf16_residual_ && !norm_.rms) norm_.ones = s.ones();
  const int64_t vocab_local = head_w_->local_shape[0];
  acts_.init([=] { return std::make_unique<Acts>(rows, C, vocab_local, norm_out, residual); });
}

// logits = norm(x) W_head^T; loss_sum = sum over tokens of cross-entropy(logits, target).
// In training the logits buffer is overwritten by dloss * (softmax - onehot) in the same pass.
void Head::forward(const Microbatch& mb, Tensor& x) {
  const loom_ops_v2* o = api_.ops();
  const int64_t n = x.dim(0), N = mb.rows();
  Acts& a = *acts_;
  Tensor logits = rows_of(a.logits, N);
  norm_stored(api_, norm_, a.norm, x, n, dh_, *head_w_, norm_writes_);  // dh_: free until backward
  norm_.keep_input(o, a.norm, x, a.x_in, rows_of(dh_, n), n, bf16_residual_);
  // The head is column-parallel over the vocabulary: f on the way in.
  api_.enter_linears(rows_of(a.norm.out, n), {{&logits, head_w_}});
  const int64_t vocab_begin = head_w_->slice.length >= 0 ? head_w_->slice.begin : 0;
  loss_sum_ = mb.targets
                  ? api_.cross_entropy(logits, mb.targets, vocab_begin, c_.vocab_size, mb.dloss)
                  : 0.0;
}

int64_t Head::saved_bytes(const Microbatch& mb) const {
  const int64_t N = mb.rows(), n = api_.local_rows(N), C = c_.d_model;
  const int64_t full = n == N ? 0 : N * C;  // the gathered rows, under sequence parallelism
  const Acts& a = *acts_;
  return static_cast<int64_t>(dtype_size(a.x_in.dtype()) + dtype_size(a.norm.out.dtype())) * n * C +
         4 * (2 * n + full + N * head_w_->local_shape[0]);
}

void Head::backward(const Microbatch& mb, Tensor& dx) {
  const loom_ops_v2* o = api_.ops();
  const int64_t n = dx.dim(0), N = mb.rows();
  const Acts& a = *acts_;
  Tensor dlogits = rows_of(a.logits, N), dh = rows_of(dh_, N);
  api_.linears_bwd_regather(dh, rows_of(a.norm.out, n),
                            {{&dlogits, head_w_}});  // sp gathers the rows again
  Tensor dh_local = api_.region_enter_bwd(dh);
  norm_.backward(o, a.norm, dx, dh_local, rows_of(a.x_in, n), n);
}

}  // namespace loom::gpt
