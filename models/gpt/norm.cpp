#include "gpt/norm.hpp"

#include "ops/typed_ops.hpp"

namespace loom::gpt {

NormActs::NormActs(int64_t rows, int64_t C)
    : out(Tensor::empty({rows, C})), mean(Tensor::empty({rows})), rstd(Tensor::empty({rows})) {}

// An fp32 output goes to the ABI 2 kernel; a bf16 one to the device's typed entry, which the
// block asks for only where the device writes bf16 norms (ActDtypes::norm_writes).
void Norm::forward(const loom_ops_v2* o, NormActs& a, const Tensor& x, int64_t rows) const {
  const int64_t C = w->local_shape[0];
  const float* bias = b ? b->value.f32() : nullptr;
  if (a.out.dtype() != LOOM_F32) {
    const loom_ops* t = ops::typed(o);
    const loom_ref out{a.out.data(), a.out.dtype(), 0};
    const loom_cref inp{x.f32(), LOOM_F32, 0};
    if (!rms)
      return t->layernorm_fwd(out, a.mean.f32(), a.rstd.f32(), inp, w->value.f32(), bias, rows, C,
                              eps);
    return t->rmsnorm_fwd(out, a.rstd.f32(), inp, w->value.f32(), rows, C, eps);
  }
  if (!rms)
    o->layernorm_fwd_eps(a.out.f32(), a.mean.f32(), a.rstd.f32(), x.f32(), w->value.f32(), bias,
                         rows, C, eps);
  else
    o->rmsnorm_fwd_eps(a.out.f32(), a.rstd.f32(), x.f32(), w->value.f32(), rows, C, eps);
}

// (x - mean) = x + (-1) mean 1^T: a GEMM of inner size 1 is the row-broadcast every device has,
// and its one rounding is the subtraction's.
void Norm::keep_input(const loom_ops_v2* o, NormActs& a, const Tensor& x, Tensor& kept,
                      const Tensor& work, int64_t rows, bool rounds) const {
  const int64_t C = w->local_shape[0], n = rows * C;
  if (!rounds) {
    if (kept.data() != x.data()) copy_bytes(kept.data(), x.data(), n * sizeof(float));
    return;
  }
  const Tensor& wide = kept.dtype() == LOOM_F32 ? kept : work;
  if (wide.data() != x.data()) copy_bytes(wide.data(), x.data(), n * sizeof(float));
  if (!rms) {
    o->gemm(0, 0, rows, C, 1, -1.f, a.mean.f32(), 1, ones.f32(), C, 1.f,
            const_cast<float*>(wide.f32()), C);
    o->zero(a.mean.data(), rows * static_cast<int64_t>(sizeof(float)));
  }
  if (wide.data() == kept.data())
    o->quantize(const_cast<float*>(wide.f32()), n, LOOM_BF16, 1.f, nullptr, nullptr);
  else
    o->quantize_into(kept.data(), LOOM_BF16, wide.f32(), n, 1.f, nullptr, nullptr);
}

void Norm::backward(const loom_ops_v2* o, const NormActs& a, Tensor& dinp, const Tensor& dout,
                    const Tensor& x, int64_t rows) const {
  const int64_t C = w->local_shape[0];
  if (x.dtype() != LOOM_F32) {  // a kept input in 16 bits (keep_input): the typed entry reads it
    const loom_ops* t = ops::typed(o);
    const loom_ref d{dinp.data(), LOOM_F32, 0};
    const loom_cref dy{dout.f32(), LOOM_F32, 0}, inp{x.data(), x.dtype(), 0};
    if (!rms)
      return t->layernorm_bwd(d, w->grad.f32(), b ? b->grad.f32() : nullptr, dy, inp,
                              w->value.f32(), a.mean.f32(), a.rstd.f32(), rows, C);
    return t->rmsnorm_bwd(d, w->grad.f32(), dy, inp, w->value.f32(), a.rstd.f32(), rows, C);
  }
  if (!rms)
    o->layernorm_bwd(dinp.f32(), w->grad.f32(), b ? b->grad.f32() : nullptr, dout.f32(), x.f32(),
                     w->value.f32(), a.mean.f32(), a.rstd.f32(), rows, C);
  else
    o->rmsnorm_bwd(dinp.f32(), w->grad.f32(), dout.f32(), x.f32(), w->value.f32(), a.rstd.f32(),
                   rows, C);
}

}  // namespace loom::gpt
