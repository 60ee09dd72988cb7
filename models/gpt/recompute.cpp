// Activation recomputation ([model] recompute): which activations a block keeps, and how its
// backward refills the rest. Replays run the same kernels on the same inputs in the same order
// as forward did, so losses and gradients are the same to the bit as without recomputation.
#include <cstring>

#include "gpt/layers.hpp"

namespace loom::gpt {

namespace {

// How far recomputation may go and still keep a tensor: 0 none, 1 selective, 2 full.
int level(const std::string& policy) {
  return policy == "full" ? 2 : policy == "selective" ? 1 : 0;
}

// Every activation of a block with its shape and the strongest policy that still keeps it:
// full keeps the input only; selective also keeps the GEMM outputs, the attention core and the
// norms' statistics, and drops the norms' outputs and the MLP activation.
template <class F>
void each_part(BlockActs& a, const model::Config& c, int64_t rows, F&& f) {
  const int64_t C = c.d_model;
  f(a.x_in, std::vector<int64_t>{rows, C}, 2);
  f(a.x_mid, std::vector<int64_t>{rows, C}, 1);
  f(a.qkv, std::vector<int64_t>{rows, c.qkv_width()}, 1);
  f(a.att, std::vector<int64_t>{rows, C}, 1);
  f(a.lse, std::vector<int64_t>{rows * c.n_head}, 1);
  f(a.fc, std::vector<int64_t>{rows, c.fc_out()}, 1);
  f(a.act, std::vector<int64_t>{rows, c.d_ff}, 0);
  for (NormActs* n : {&a.ln1, &a.ln2}) {
    f(n->out, std::vector<int64_t>{rows, C}, 0);
    f(n->mean, std::vector<int64_t>{rows}, 1);
    f(n->rstd, std::vector<int64_t>{rows}, 1);
  }
}

// The dtype of each part: the norms' outputs and inputs, the MLP's pre-activation and activation,
// q, k, v and the attention's output as `dtypes` says, the rest fp32.
loom_dtype dtype_of(const BlockActs& a, const Tensor& t, const ActDtypes& dtypes) {
  if (&t == &a.act) return dtypes.act;
  if (&t == &a.fc) return dtypes.fc;
  if (&t == &a.att) return dtypes.att;
  if (&t == &a.qkv) return dtypes.qkv;
  if (&t == &a.x_in || &t == &a.x_mid) return dtypes.residual;
  return &t == &a.ln1.out || &t == &a.ln2.out ? dtypes.norm_out : LOOM_F32;
}

}  // namespace

BlockActs::BlockActs(const model::Config& c, int64_t rows, const ActDtypes& dtypes) {
  each_part(*this, c, rows, [&](Tensor& t, std::vector<int64_t> shape, int) {
    t = Tensor::empty(std::move(shape), dtype_of(*this, t, dtypes));
  });
}

BlockActs::BlockActs(const model::Config& c, int64_t rows, const std::string& policy,
                     const BlockActs& shared, const ActDtypes& dtypes)
    : BlockActs(shared) {
  each_part(*this, c, rows, [&](Tensor& t, std::vector<int64_t> shape, int keeps) {
    const loom_dtype dtype = dtype_of(*this, t, dtypes);
    if (keeps >= level(policy))
      t = Tensor::empty(std::move(shape), dtype);
    else if (dtype != t.dtype())  // the shared fp32 tensor has room for a narrower one
      t = Tensor::borrow(t.data(), std::move(shape), dtype);
  });
}

BlockActs BlockActs::dropped_by(const model::Config& c, int64_t rows, const std::string& policy) {
  BlockActs a;
  each_part(a, c, rows, [&](Tensor& t, std::vector<int64_t> shape, int keeps) {
    if (keeps < level(policy)) t = Tensor::empty(std::move(shape));
  });
  return a;
}

// A full replay also needs a residual stream to run on.
RecomputeScratch::RecomputeScratch(const model::Config& c, int64_t rows)
    : acts(BlockActs::dropped_by(c, rows, c.recompute)) {
  if (c.recompute == "full") x = Tensor::empty({rows, c.d_model});
  bytes_ = x.defined() ? static_cast<int64_t>(x.bytes()) : 0;
  each_part(acts, c, rows, [&](Tensor& t, std::vector<int64_t>, int) {
    if (t.defined()) bytes_ += static_cast<int64_t>(t.bytes());
  });
}

// selective: ln1 = norm(x_in), ln2 = norm(x_mid), act = gelu/swiglu(fc) (writing the same
// statistics again); full: forward once more from x_in on a copy of the residual stream.
void Block::recompute(const Microbatch& mb) {
  Acts& a = *acts_;
  const int64_t n = api_.local_rows(mb.rows()), N = mb.rows(), C = c_.d_model;
  if (policy_ == "full") {
    Tensor x = recompute_->x.rows(0, n);
    copy_bytes(x.data(), a.x_in.data(), n * C * sizeof(float));
    replaying_ = true;
    forward(mb, x);
    replaying_ = false;
    return;
  }
  norm_forward(ln1_, a.ln1, a.x_in.rows(0, n), n);
  norm_forward(ln2_, a.ln2, a.x_mid.rows(0, n), n);
  // The norms' inputs as forward would have kept them without recomputation, where they lie.
  const Tensor work = view(s_.rows, n, C);
  ln1_.keep_input(api_.ops(), a.ln1, a.x_in, a.x_in, work, n, dtypes_.bf16_residual);
  ln2_.keep_input(api_.ops(), a.ln2, a.x_mid, a.x_mid, work, n, dtypes_.bf16_residual);
  Tensor act = view(a.act, N, out_w_->local_shape[1]);
  store_activation(act, view(a.fc, N, fc_w_->local_shape[0]), N);
}

}  // namespace loom::gpt
