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

void Norm::backward(const loom_ops_v2* o, const NormActs& a, Tensor& dinp, const Tensor& dout,
                    const Tensor& x, int64_t rows) const {
  const int64_t C = w->local_shape[0];
  if (!rms)
    o->layernorm_bwd(dinp.f32(), w->grad.f32(), b ? b->grad.f32() : nullptr, dout.f32(), x.f32(),
                     w->value.f32(), a.mean.f32(), a.rstd.f32(), rows, C);
  else
    o->rmsnorm_bwd(dinp.f32(), w->grad.f32(), dout.f32(), x.f32(), w->value.f32(), a.rstd.f32(),
                   rows, C);
}

}  // namespace loom::gpt
