// Element-wise and row-wise kernels of the CUDA op table: embedding, bias, activations, vector
// arithmetic, the sum of squares, AdamW and the narrow-format cast. Each mirrors its CPU twin in
// runtime/ops/cpu (same formulas, fp32 math); tests/cuda compares them on the same inputs.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/memory.hpp"

namespace loom::cuda {

namespace {

// out[bt, c] = wte[tok[bt], c] + wpe[t, c]
__global__ void embedding_fwd_k(float* out, const int32_t* tok, const float* wte, const float* wpe, int64_t BT,
                                int64_t T, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C;
  out[i] = wte[static_cast<int64_t>(tok[bt]) * C + c] + (wpe ? wpe[(bt % T) * C + c] : 0.f);
}

// dwte[tok[bt], c] += dout[bt, c]; dwpe[t, c] += dout[bt, c] (atomics: tokens repeat)
__global__ void embedding_bwd_k(float* dwte, float* dwpe, const float* dout, const int32_t* tok, int64_t BT,
                                int64_t T, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C;
  atomicAdd(&dwte[static_cast<int64_t>(tok[bt]) * C + c], dout[i]);
  if (dwpe) atomicAdd(&dwpe[(bt % T) * C + c], dout[i]);
}

__global__ void bias_add_k(float* out, const float* bias, int64_t N, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < N * C) out[i] += bias[i % C];
}

// dbias[j] += sum_i dout[i, j]: one thread per column, rows in order (deterministic).
__global__ void bias_bwd_k(float* dbias, const float* dout, int64_t N, int64_t C) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= C) return;
  float s = 0.f;
  for (int64_t i = 0; i < N; ++i) s += dout[i * C + j];
  dbias[j] += s;
}

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
constexpr float kGeluK = 0.7978845608028654f;
__global__ void gelu_fwd_k(float* out, const float* inp, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  out[i] = 0.5f * x * (1.f + tanhf(kGeluK * (x + 0.044715f * x * x * x)));
}

// d gelu/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
__global__ void gelu_bwd_k(float* dinp, const float* inp, const float* dout, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i], th = tanhf(kGeluK * (x + 0.044715f * x * x * x));
  dinp[i] = dout[i] * (0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * kGeluK * (1.f + 3.f * 0.044715f * x * x));
}

// gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2))
__global__ void gelu_erf_fwd_k(float* out, const float* inp, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = 0.5f * inp[i] * (1.f + erff(inp[i] * 0.7071067811865476f));
}

// d gelu_erf/dx = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)
__global__ void gelu_erf_bwd_k(float* dinp, const float* inp, const float* dout, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  dinp[i] = dout[i] * (0.5f * (1.f + erff(x * 0.7071067811865476f)) + x * 0.3989422804014327f * expf(-0.5f * x * x));
}

__device__ inline float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// out[i, j] = silu(g) u, rows [g (F) | u (F)]
__global__ void swiglu_fwd_k(float* out, const float* inp, int64_t N, int64_t F) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= N * F) return;
  const int64_t i = k / F, j = k % F;
  const float g = inp[i * 2 * F + j], u = inp[i * 2 * F + F + j];
  out[k] = g * sigmoid(g) * u;
}

// dg = dout u s (1 + g (1 - s)), du = dout g s, s = sigmoid(g)
__global__ void swiglu_bwd_k(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= N * F) return;
  const int64_t i = k / F, j = k % F;
  const float g = inp[i * 2 * F + j], u = inp[i * 2 * F + F + j], s = sigmoid(g);
  dinp[i * 2 * F + j] = dout[k] * u * s * (1.f + g * (1.f - s));
  dinp[i * 2 * F + F + j] = dout[k] * g * s;
}

__global__ void add_k(float* y, const float* a, const float* b, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}
__global__ void accumulate_k(float* y, const float* x, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += x[i];
}
__global__ void scale_k(float* x, float s, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= s;
}

// sum x^2 in double: each block sums a grid-strided share, then one atomic per block.
__global__ void sum_squares_k(double* out, const float* x, int64_t n) {
  __shared__ double part[kBlock];
  double s = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    s += static_cast<double>(x[i]) * x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = kBlock / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr ((m / c1) / (sqrt(v / c2) + eps) + wd p)
__global__ void adamw_k(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2,
                        float eps, float wd, float c1, float c2) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i], mi = b1 * m[i] + (1.f - b1) * gi, vi = b2 * v[i] + (1.f - b2) * gi * gi;
  m[i] = mi, v[i] = vi;
  p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
}

// The narrow formats as (mantissa bits, smallest normal exponent, max, infinities, saturation);
// see loom/formats.hpp for the table and the rounding rule, and ops/cpu/quantize.cpp for the
// same arithmetic on the CPU, which this must match bit for bit.
struct NarrowFormat {
  int man, emin;
  float max;
  bool has_inf, saturates, bf16;
};

// bf16: the upper half of the fp32 pattern, rounded to nearest-even by adding 0x7fff plus the
// lowest kept bit (a carry may reach infinity, as IEEE overflow does); a NaN stays a NaN.
__device__ float round_bf16(float v) {
  unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float((u | 0x400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float(u & 0xffff0000u);
}

// The other formats: |v| = m 2^e on the grid of spacing q = 2^(max(e, emin) - man), with q and
// 1/q built in the exponent bits (exact; clamped so 1/q stays normal, past max anyway), and
// rint(|v| / q) rounding to nearest-even. Finite overflow saturates or becomes inf, counted.
__device__ float cast_grid(const NarrowFormat f, float v, unsigned long long* clips) {
  const unsigned abs_bits = __float_as_uint(v) & 0x7fffffffu;
  const float a = __uint_as_float(abs_bits);
  int eb = static_cast<int>(abs_bits >> 23);
  const int eb_min = f.emin + 127;
  eb = eb < eb_min ? eb_min : eb;
  eb = eb > 254 - f.man ? 254 - f.man : eb;
  const float inv_q = __uint_as_float(static_cast<unsigned>(254 - eb + f.man) << 23);
  const float q = __uint_as_float(static_cast<unsigned>(eb - f.man) << 23);
  float r = rintf(a * inv_q) * q;
  const bool finite = abs_bits < 0x7f800000u;
  if (finite && r > f.max) {
    atomicAdd(clips, 1ull);
    r = f.saturates ? f.max : INFINITY;
  }
  if (abs_bits == 0x7f800000u) r = f.has_inf ? INFINITY : __int_as_float(0x7fc00000);
  if (abs_bits > 0x7f800000u) return v;
  return copysignf(r, v);
}

// amax over |x| (as ordered int bits: |x| >= 0), NaNs counted; then x = cast(x s) / s.
__global__ void amax_k(const float* x, int64_t n, unsigned* amax_bits, unsigned long long* nans) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float a = fabsf(x[i]);
  if (isnan(a))
    atomicAdd(nans, 1ull);
  else
    atomicMax(amax_bits, __float_as_uint(a));
}

// x = cast(x scale) (1 / scale); a finite x whose product overflows fp32 becomes +-FLT_MAX first,
// so the cast saturates or overflows it (and counts it) like any other large value.
__global__ void quantize_k(float* x, int64_t n, NarrowFormat f, float scale, float inv, unsigned long long* clips) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v = x[i] * scale;
  if (isinf(v) && isfinite(x[i])) v = copysignf(3.402823466e38f, v);
  float r;
  if (f.bf16) {
    r = round_bf16(v);
    if (isfinite(v) && isinf(r)) atomicAdd(clips, 1ull);
  } else {
    r = cast_grid(f, v, clips);
  }
  x[i] = r * inv;
}

template <class K, class... A>
void launch(K kernel, int64_t n, A... args) {
  if (n <= 0) return;
  kernel<<<blocks_for(n), kBlock, 0, stream()>>>(args...);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

// Small device scratch for reductions returned to the host.
struct Scratch {
  double* sum = nullptr;
  unsigned* amax = nullptr;
  unsigned long long *nans = nullptr, *clips = nullptr;
  Scratch() {
    LOOM_CUDA_CHECK(cudaMalloc(&sum, sizeof(double)));
    LOOM_CUDA_CHECK(cudaMalloc(&amax, sizeof(unsigned)));
    LOOM_CUDA_CHECK(cudaMalloc(&nans, 2 * sizeof(unsigned long long)));
    clips = nans + 1;
  }
};
Scratch& scratch() {
  static Scratch s;
  return s;
}

}  // namespace

// Token ids may live in host memory (the data loader's buffers): staged for the kernel.
void embedding_fwd(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                   int64_t C) {
  Staged tok(const_cast<int32_t*>(tokens), B * T * sizeof(int32_t), true, false);
  launch(embedding_fwd_k, B * T * C, out, tok.as<const int32_t>(), wte, wpe, B * T, T, C);
}
void embedding_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                   int64_t C) {
  Staged tok(const_cast<int32_t*>(tokens), B * T * sizeof(int32_t), true, false);
  launch(embedding_bwd_k, B * T * C, dwte, dwpe, dout, tok.as<const int32_t>(), B * T, T, C);
}
void bias_add(float* out, const float* bias, int64_t N, int64_t C) { launch(bias_add_k, N * C, out, bias, N, C); }
void bias_bwd(float* dbias, const float* dout, int64_t N, int64_t C) { launch(bias_bwd_k, C, dbias, dout, N, C); }
void gelu_fwd(float* out, const float* inp, int64_t n) { launch(gelu_fwd_k, n, out, inp, n); }
void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n) { launch(gelu_bwd_k, n, dinp, inp, dout, n); }
void gelu_erf_fwd(float* out, const float* inp, int64_t n) { launch(gelu_erf_fwd_k, n, out, inp, n); }
void gelu_erf_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  launch(gelu_erf_bwd_k, n, dinp, inp, dout, n);
}
void swiglu_fwd(float* out, const float* inp, int64_t N, int64_t F) { launch(swiglu_fwd_k, N * F, out, inp, N, F); }
void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  launch(swiglu_bwd_k, N * F, dinp, inp, dout, N, F);
}
void add(float* y, const float* a, const float* b, int64_t n) { launch(add_k, n, y, a, b, n); }
void accumulate(float* y, const float* x, int64_t n) { launch(accumulate_k, n, y, x, n); }
void scale(float* x, float s, int64_t n) { launch(scale_k, n, x, s, n); }

double sum_squares(const float* x, int64_t n) {
  Scratch& s = scratch();
  LOOM_CUDA_CHECK(cudaMemsetAsync(s.sum, 0, sizeof(double), stream()));
  if (n > 0) {
    sum_squares_k<<<std::min<unsigned>(blocks_for(n), 1024), kBlock, 0, stream()>>>(s.sum, x, n);
    LOOM_CUDA_LAUNCHED();
  }
  double out = 0;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(&out, s.sum, sizeof(double), cudaMemcpyDeviceToHost, stream()));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return out;
}

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
           float eps, float weight_decay, int64_t step) {
  const float c1 = 1.f - std::pow(beta1, static_cast<float>(step)), c2 = 1.f - std::pow(beta2, static_cast<float>(step));
  launch(adamw_k, n, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, c1, c2);
}

void quantize(float* x, int64_t n, int32_t dtype, float scale, float* amax, int64_t* clipped) {
  NarrowFormat f{};
  switch (dtype) {
    case LOOM_BF16: f = {7, -126, 3.38953139e38f, true, false, true}; break;
    case LOOM_F16: f = {10, -14, 65504.f, true, false, false}; break;
    case LOOM_FP8_E4M3: f = {3, -6, 448.f, false, true, false}; break;
    case LOOM_FP8_E5M2: f = {2, -14, 57344.f, true, true, false}; break;
    default: f.man = -1;
  }
  Scratch& s = scratch();
  LOOM_CUDA_CHECK(cudaMemsetAsync(s.amax, 0, sizeof(unsigned), stream()));
  LOOM_CUDA_CHECK(cudaMemsetAsync(s.nans, 0, 2 * sizeof(unsigned long long), stream()));
  launch(amax_k, n, static_cast<const float*>(x), n, s.amax, s.nans);
  if (f.man >= 0) launch(quantize_k, n, x, n, f, scale, 1.f / scale, s.clips);
  unsigned bits = 0;
  unsigned long long counts[2] = {0, 0};
  LOOM_CUDA_CHECK(cudaMemcpyAsync(&bits, s.amax, sizeof bits, cudaMemcpyDeviceToHost, stream()));
  LOOM_CUDA_CHECK(cudaMemcpyAsync(counts, s.nans, sizeof counts, cudaMemcpyDeviceToHost, stream()));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));
  float top;
  std::memcpy(&top, &bits, sizeof top);
  if (amax) *amax = counts[0] ? NAN : top;
  if (clipped) *clipped = static_cast<int64_t>(counts[1]);
}

}  // namespace loom::cuda
