// Activation recomputation ([model] recompute): which activations a block keeps, and how its
// backward refills the rest. Replays run the same kernels on the same inputs in the same order
// as forward did, so losses and gradients are the same to the bit as without recomputation.
#include <cstring>

#include "gpt/layers.hpp"

namespace loom::gpt {

BlockActs::BlockActs(const GptConfig& c, int64_t rows, const std::string& policy, const BlockActs& shared)
    : BlockActs(shared) {
  x_in = Tensor::empty({rows, c.d_model});
  if (policy == "full") return;
  // selective: the GEMM outputs, the attention core and the norms' statistics are kept; the
  // norms' outputs and the MLP activation stay aliased to the shared set.
  x_mid = Tensor::empty({rows, c.d_model});
  qkv = Tensor::empty({rows, c.qkv_width()});
  att = Tensor::empty({rows, c.d_model});
  lse = Tensor::empty({rows * c.n_head});
  fc = Tensor::empty({rows, c.fc_out()});
  ln1.mean = Tensor::empty({rows}), ln1.rstd = Tensor::empty({rows});
  ln2.mean = Tensor::empty({rows}), ln2.rstd = Tensor::empty({rows});
}

RecomputeScratch::RecomputeScratch(const GptConfig& c, int64_t rows)
    : acts(std::make_unique<BlockActs>(c, rows)) {
  if (c.recompute == "full") {
    x = Tensor::empty({rows, c.d_model});
    return;
  }
  // selective shares only the norms' outputs and the MLP activation: blocks own the rest.
  BlockActs& a = *acts;
  for (Tensor* t : {&a.x_in, &a.x_mid, &a.qkv, &a.att, &a.lse, &a.fc, &a.ln1.mean, &a.ln1.rstd, &a.ln2.mean, &a.ln2.rstd})
    *t = Tensor();
}

int64_t RecomputeScratch::bytes() const {
  const BlockActs& a = *acts;
  int64_t n = 0;
  for (const Tensor* t : {&a.x_in, &a.x_mid, &a.qkv, &a.att, &a.lse, &a.fc, &a.act, &a.ln1.out, &a.ln1.mean,
                          &a.ln1.rstd, &a.ln2.out, &a.ln2.mean, &a.ln2.rstd, &x})
    if (t->defined()) n += static_cast<int64_t>(t->bytes());
  return n;
}

// selective: ln1 = norm(x_in), ln2 = norm(x_mid), act = gelu/swiglu(fc) (writing the same
// statistics again); full: forward once more from x_in on a copy of the residual stream.
void Block::recompute(const Microbatch& mb) {
  const loom_ops* o = api_.ops();
  Acts& a = *acts_;
  const int64_t n = api_.local_rows(mb.rows()), N = mb.rows(), C = c_.d_model;
  if (policy_ == "full") {
    Tensor x = recompute_->x.rows(0, n);
    std::memcpy(x.data(), a.x_in.data(), n * C * sizeof(float));
    replaying_ = true;
    forward(mb, x);
    replaying_ = false;
    return;
  }
  ln1_.forward(o, a.ln1, a.x_in.rows(0, n), n);
  ln2_.forward(o, a.ln2, a.x_mid.rows(0, n), n);
  const int64_t F = out_w_->local_shape[1];
  const float* fc = a.fc.f32();
  if (c_.mlp == "swiglu")
    o->swiglu_fwd(a.act.f32(), fc, N, F);
  else
    o->gelu_fwd(a.act.f32(), fc, N * F);
}

}  // namespace loom::gpt
