#include "gpt/layer_parts.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.hpp"
#include "ops/typed_ops.hpp"
#include "parallel/expert_dispatch.hpp"

namespace loom::gpt {

// The MLP's activation over N rows of F outputs (fc rows are 2F wide for SwiGLU's [gate | up]).
void activation_fwd(const loom_ops_v2* o, const model::Config& c, float* act, const float* fc,
                    int64_t N, int64_t F) {
  if (c.mlp == "swiglu") return o->swiglu_fwd(act, fc, N, F);
  if (c.mlp == "gelu") return o->gelu_fwd(act, fc, N * F);
  if (!LOOM_HAS_FIELD(o, loom_ops_v2, gelu_erf_fwd) || !o->gelu_erf_fwd)
    throw RuntimeError(
        "[model] mlp = \"gelu_exact\": this device's op table has no exact GELU (ABI 1.8)");
  o->gelu_erf_fwd(act, fc, N * F);
}

void activation_bwd(const loom_ops_v2* o, const model::Config& c, float* dfc, const float* fc,
                    const float* dact, int64_t N, int64_t F) {
  if (c.mlp == "swiglu") return o->swiglu_bwd(dfc, fc, dact, N, F);
  if (c.mlp == "gelu") return o->gelu_bwd(dfc, fc, dact, N * F);
  o->gelu_erf_bwd(dfc, fc, dact, N * F);
}

void activation_fwd(const loom_ops_v2* o, const model::Config& c, const Tensor& act,
                    const Tensor& fc, int64_t N, int64_t F) {
  if (act.dtype() == LOOM_F32 && fc.dtype() == LOOM_F32)
    return activation_fwd(o, c, static_cast<float*>(act.data()), fc.f32(), N, F);
  const loom_ops* t = ops::typed(o);
  const loom_ref out{act.data(), act.dtype(), 0};
  const loom_cref inp{fc.data(), fc.dtype(), 0};
  if (c.mlp == "swiglu") return t->swiglu_fwd(out, inp, N, F);
  (c.mlp == "gelu" ? t->gelu_fwd : t->gelu_erf_fwd)(out, inp, N * F);
}

void activation_bwd(const loom_ops_v2* o, const model::Config& c, const Tensor& dfc,
                    const Tensor& fc, const float* dact, int64_t N, int64_t F) {
  if (dfc.dtype() == LOOM_F32 && fc.dtype() == LOOM_F32)
    return activation_bwd(o, c, static_cast<float*>(dfc.data()), fc.f32(), dact, N, F);
  const loom_ops* t = ops::typed(o);
  const loom_ref dinp{dfc.data(), dfc.dtype(), 0};
  const loom_cref inp{fc.data(), fc.dtype(), 0}, dout{dact, LOOM_F32, 0};
  if (c.mlp == "swiglu") return t->swiglu_bwd(dinp, inp, dout, N, F);
  (c.mlp == "gelu" ? t->gelu_bwd : t->gelu_erf_bwd)(dinp, inp, dout, N * F);
}

Param& declare_param(ParamStore& ps, LayerApi& api, std::vector<Param*>& owner, std::string name,
                     Role role, std::vector<int64_t> shape, Init init, bool decay, int fused) {
  // Experts are split by the expert slot (over ep), everything else by the tensor slot (over tp).
  const ExpertDispatch* ex = api.experts();
  Slice s = role == Role::Expert && ex ? Slice{0, ex->first_expert(), ex->local_experts(), 1}
                                       : api.shard(role, shape, fused);
  Param& p = ps.declare(std::move(name), role, std::move(shape), init, decay, s);
  owner.push_back(&p);
  return p;
}

Scratch::Scratch(const model::Config& c, int64_t rows) {
  dh = Tensor::empty({rows, c.d_model});
  dqkv = Tensor::empty({rows, c.qkv_width()});
  datt = Tensor::empty({rows, c.d_model});
  dfc = Tensor::empty({rows, c.fc_out()});
  dact = Tensor::empty({rows, std::max(c.d_ff, c.qkv_width())});
  this->rows = Tensor::empty({rows, c.d_model});
}

// t becomes bf16 while every asker wants bf16, and fp32 for good once one does not.
static void narrow_while_all_ask(Tensor& t, bool& wide, loom_dtype dtype) {
  wide = wide || dtype != LOOM_BF16;
  const loom_dtype want = wide ? LOOM_F32 : LOOM_BF16;
  if (t.dtype() == want) return;
  TensorPurpose purpose("the layers' shared scratch");
  t = Tensor::empty(t.shape(), want);
}

void Scratch::use_dfc(loom_dtype dtype) { narrow_while_all_ask(dfc, wide_dfc_, dtype); }
void Scratch::use_dqkv(loom_dtype dtype) { narrow_while_all_ask(dqkv, wide_dqkv_, dtype); }

const Tensor& Scratch::ones() {
  if (ones_.defined()) return ones_;
  const std::vector<float> host(static_cast<size_t>(dh.shape()[1]), 1.f);
  TensorPurpose purpose("the layers' shared scratch");
  ones_ = Tensor::empty({dh.shape()[1]});
  upload(ones_, host.data());
  return ones_;
}

void norm_stored(const LayerApi& api, const Norm& norm, NormActs& a, const Tensor& x, int64_t n,
                 const Tensor& staging, const Param& reader, bool writes) {
  if (a.out.dtype() == LOOM_F32 || writes) return norm.forward(api.ops(), a, x, n);
  const int64_t C = a.out.dim(1);
  NormActs wide = a;
  wide.out = Tensor::borrow(staging.data(), {n, C});
  norm.forward(api.ops(), wide, x, n);
  Tensor out = a.out.rows(0, n);
  api.numerics().store(wide.out, reader.name + ".x", LOOM_OPERAND_ACTIVATION, out);
}

bool device_reads_bf16(const loom_ops_v2* o, int op) {
  uint32_t takes[LOOM_OP_COUNT];
  ops::typed_dtypes(*o, takes);
  const bool narrows = LOOM_HAS_FIELD(o, loom_ops_v2, quantize_into) && o->quantize_into;
  return narrows && (takes[op] & (1u << LOOM_BF16)) != 0;
}

// cos/sin of t * inv_freq_i, in fp32 as the reference implementations compute them.
RopeTables::RopeTables(const model::Config& c) {
  const int64_t half = c.head_dim() / 2, T = c.seq_len;
  std::vector<double> inv = c.rope_inv_freq();
  std::vector<float> cs(T * half), sn(T * half);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * static_cast<float>(inv[i]);
      cs[t * half + i] = std::cos(angle), sn[t * half + i] = std::sin(angle);
    }
  cos = Tensor::empty({T, half}), sin = Tensor::empty({T, half});
  upload(cos, cs.data());
  upload(sin, sn.data());
}

}  // namespace loom::gpt
