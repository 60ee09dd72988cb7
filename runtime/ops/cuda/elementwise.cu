// The element-wise, reduction, optimizer and wire codec entries of the CUDA op table: the launch
// sequences of kernels/elementwise.cuh, reductions.cuh, adamw.cuh and codecs.cuh on the device
// (one translation unit: a kernel header's __global__ functions are defined where it is included).
#include <cmath>

#include "ops/cuda/kernels.hpp"
#include "ops/cuda/kernels/adamw.cuh"
#include "ops/cuda/kernels/codecs.cuh"
#include "ops/cuda/kernels/elementwise.cuh"
#include "ops/cuda/kernels/reductions.cuh"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

namespace ew = elementwise;

// Token ids may live in host memory (the data loader's buffers): uploaded for the kernel.
void embedding_fwd(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                   int64_t T, int64_t C) {
  run_op(
      [&](DeviceGo& go) { ew::embedding_fwd(go, out, go.in(tokens, B * T), wte, wpe, B, T, C); });
}
void embedding_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                   int64_t T, int64_t C) {
  run_op([&](DeviceGo& go) {
    ew::embedding_bwd(go, dwte, dwpe, dout, go.in(tokens, B * T), B, T, C);
  });
}
void bias_add(float* out, const float* bias, int64_t N, int64_t C) {
  run_op([&](DeviceGo& go) { ew::bias_add(go, out, bias, N, C); });
}
void bias_bwd(float* dbias, const float* dout, int64_t N, int64_t C) {
  run_op([&](DeviceGo& go) { ew::bias_bwd(go, dbias, dout, N, C); });
}
void gelu_fwd(float* out, const float* inp, int64_t n) {
  run_op([&](DeviceGo& go) { ew::map(go, out, inp, n, ew::Gelu{}); });
}
void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  run_op([&](DeviceGo& go) { ew::zip(go, dinp, inp, dout, n, ew::GeluGrad{}); });
}
void gelu_erf_fwd(float* out, const float* inp, int64_t n) {
  run_op([&](DeviceGo& go) { ew::map(go, out, inp, n, ew::GeluErf{}); });
}
void gelu_erf_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  run_op([&](DeviceGo& go) { ew::zip(go, dinp, inp, dout, n, ew::GeluErfGrad{}); });
}
void swiglu_fwd(float* out, const float* inp, int64_t N, int64_t F) {
  run_op([&](DeviceGo& go) { ew::swiglu_fwd(go, out, inp, N, F); });
}
void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  run_op([&](DeviceGo& go) { ew::swiglu_bwd(go, dinp, inp, dout, N, F); });
}
void add(float* y, const float* a, const float* b, int64_t n) {
  run_op([&](DeviceGo& go) { ew::zip(go, y, a, b, n, ew::Add{}); });
}
void accumulate(float* y, const float* x, int64_t n) {
  run_op([&](DeviceGo& go) { ew::zip(go, y, y, x, n, ew::Add{}); });
}
void scale(float* x, float s, int64_t n) {
  run_op([&](DeviceGo& go) { ew::map(go, x, x, n, ew::Times{s}); });
}

// The contract's one waiting reduction: the host gets the value.
double sum_squares(const float* x, int64_t n) {
  double out = 0;
  run_op([&](DeviceGo& go) { reductions::sum_squares(go, go.out(&out, 1), x, n); });
  return out;
}

// Every tensor's sum into one device array, and one host wait for the lot.
void sum_squares_multi(int64_t count, const float* const* x, const int64_t* n, double* out) {
  if (count <= 0) return;
  run_op([&](DeviceGo& go) {
    double* sums = go.out(out, count);
    for (int64_t t = 0; t < count; ++t) reductions::sum_squares(go, sums + t, x[t], n[t]);
  });
}

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, int64_t step) {
  run_op([&](DeviceGo& go) {
    adam::run(go, 1, &param, &grad, &m, &v, &n, &weight_decay, lr, beta1, beta2, eps, step);
  });
}

void adamw_multi(int64_t count, float* const* params, const float* const* grads, float* const* m,
                 float* const* v, const int64_t* numel, const float* weight_decay, float lr,
                 float beta1, float beta2, float eps, int64_t step) {
  run_op([&](DeviceGo& go) {
    adam::run(go, count, params, grads, m, v, numel, weight_decay, lr, beta1, beta2, eps, step);
  });
}

void quantize(float* x, int64_t n, int32_t dtype, float scale, float* amax, int64_t* clipped) {
  const reductions::NarrowFormat f = reductions::narrow_format(dtype);
  reductions::CastStats stats{};
  run_op([&](DeviceGo& go) { reductions::quantize(go, go.out(&stats, 1), x, n, f, scale); });
  if (amax) *amax = stats.nans ? NAN : stats.amax;
  if (clipped) *clipped = static_cast<int64_t>(stats.clips);
}

// The wire codecs, over a plugin's device buffers.
void to_bf16(uint16_t* dst, const float* src, int64_t n) {
  run_op([&](DeviceGo& go) { codecs::to_bf16(go, dst, src, n); });
}
void from_bf16(float* dst, const uint16_t* src, int64_t n) {
  run_op([&](DeviceGo& go) { codecs::from_bf16(go, dst, src, n); });
}
void encode_blocks(uint8_t* dst, const float* src, int64_t count, int64_t width, int64_t blocks) {
  run_op([&](DeviceGo& go) { codecs::encode_blocks(go, dst, src, count, width, blocks); });
}
void decode_blocks(float* dst, const uint8_t* src, int64_t count, int64_t width, int64_t blocks,
                   int32_t flags) {
  run_op([&](DeviceGo& go) { codecs::decode_blocks(go, dst, src, count, width, blocks, flags); });
}

}  // namespace loom::cuda
