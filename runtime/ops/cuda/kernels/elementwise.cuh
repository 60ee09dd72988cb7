// Element-wise kernels: embedding, bias, GELU (tanh and erf), SwiGLU and vector arithmetic.
// Each mirrors its CPU twin in runtime/ops/cpu (same formulas, fp32 math).
//
// The maps over flat arrays are vectorised: thread t owns elements [4t, 4t + 4), read and
// written as one float4 where every pointer is 16-byte aligned and the four lie inside n (the
// launch passes `vec`), else one by one; so one launch serves any n, the tail included.
#pragma once

#include <cstdint>

#include "ops/cuda/device.cuh"
#include "ops/cuda/kernels/columns.cuh"

namespace loom::cuda::elementwise {

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
constexpr float kGeluK = 0.7978845608028654f;
struct Gelu {
  __device__ float operator()(float x) const {
    return 0.5f * x * (1.f + tanhf(kGeluK * (x + 0.044715f * x * x * x)));
  }
};
// dinp = dout (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
struct GeluGrad {
  __device__ float operator()(float x, float dout) const {
    const float th = tanhf(kGeluK * (x + 0.044715f * x * x * x));
    return dout * (0.5f * (1.f + th) +
                   0.5f * x * (1.f - th * th) * kGeluK * (1.f + 3.f * 0.044715f * x * x));
  }
};
// gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2))
struct GeluErf {
  __device__ float operator()(float x) const {
    return 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
  }
};
// dinp = dout (0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi))
struct GeluErfGrad {
  __device__ float operator()(float x, float dout) const {
    return dout * (0.5f * (1.f + erff(x * 0.7071067811865476f)) +
                   x * 0.3989422804014327f * expf(-0.5f * x * x));
  }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Times {
  float s;
  __device__ float operator()(float x) const { return x * s; }
};

// out[i] = f(in[i])
template <class F>
__global__ void map_k(float* out, const float* in, int64_t n, bool vec, F f) {
  const int64_t i = 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
  if (i >= n) return;
  if (vec && i + 4 <= n) {
    float4 v = *reinterpret_cast<const float4*>(in + i);
    v.x = f(v.x), v.y = f(v.y), v.z = f(v.z), v.w = f(v.w);
    *reinterpret_cast<float4*>(out + i) = v;
    return;
  }
  for (int64_t j = i; j < n && j < i + 4; ++j) out[j] = f(in[j]);
}

// out[i] = f(a[i], b[i])
template <class F>
__global__ void zip_k(float* out, const float* a, const float* b, int64_t n, bool vec, F f) {
  const int64_t i = 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
  if (i >= n) return;
  if (vec && i + 4 <= n) {
    const float4 x = *reinterpret_cast<const float4*>(a + i),
                 y = *reinterpret_cast<const float4*>(b + i);
    *reinterpret_cast<float4*>(out + i) =
        float4{f(x.x, y.x), f(x.y, y.y), f(x.z, y.z), f(x.w, y.w)};
    return;
  }
  for (int64_t j = i; j < n && j < i + 4; ++j) out[j] = f(a[j], b[j]);
}

// out[r, c] += bias[c]; four at a time when C is a multiple of 4 (a float4 never straddles rows).
__global__ void bias_add_k(float* out, const float* bias, int64_t N, int64_t C, bool vec) {
  const int64_t i = 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
  if (i >= N * C) return;
  if (vec) {
    float4 v = *reinterpret_cast<float4*>(out + i);
    const float4 b = *reinterpret_cast<const float4*>(bias + i % C);
    v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
    *reinterpret_cast<float4*>(out + i) = v;
    return;
  }
  for (int64_t j = i; j < N * C && j < i + 4; ++j) out[j] += bias[j % C];
}

// out[bt, c] = wte[tok[bt], c] + wpe[t, c]
__global__ void embedding_fwd_k(float* out, const int32_t* tok, const float* wte, const float* wpe,
                                int64_t BT, int64_t T, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C;
  out[i] = wte[static_cast<int64_t>(tok[bt]) * C + c] + (wpe ? wpe[(bt % T) * C + c] : 0.f);
}

// dwte[tok[bt], c] += dout[bt, c]; dwpe[t, c] += dout[bt, c] (atomics: a token repeats in a batch)
__global__ void embedding_bwd_k(float* dwte, float* dwpe, const float* dout, const int32_t* tok,
                                int64_t BT, int64_t T, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C;
  atomicAdd(&dwte[static_cast<int64_t>(tok[bt]) * C + c], dout[i]);
  if (dwpe) atomicAdd(&dwpe[(bt % T) * C + c], dout[i]);
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
__global__ void swiglu_bwd_k(float* dinp, const float* inp, const float* dout, int64_t N,
                             int64_t F) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= N * F) return;
  const int64_t i = k / F, j = k % F;
  const float g = inp[i * 2 * F + j], u = inp[i * 2 * F + F + j], s = sigmoid(g);
  dinp[i * 2 * F + j] = dout[k] * u * s * (1.f + g * (1.f - s));
  dinp[i * 2 * F + F + j] = dout[k] * g * s;
}

// ---- launch sequences ----

inline bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
inline Shape by4(int64_t n) { return Shape{grid_of(blocks_for((n + 3) / 4)), dim3(kBlock)}; }
inline Shape by1(int64_t n) { return Shape{grid_of(blocks_for(n)), dim3(kBlock)}; }

template <class Go, class F>
void map(Go& go, float* out, const float* in, int64_t n, F f) {
  if (n > 0) go(LOOM_KERNEL(map_k<F>), by4(n), out, in, n, aligned(out) && aligned(in), f);
}
template <class Go, class F>
void zip(Go& go, float* out, const float* a, const float* b, int64_t n, F f) {
  if (n > 0)
    go(LOOM_KERNEL(zip_k<F>), by4(n), out, a, b, n, aligned(out) && aligned(a) && aligned(b), f);
}
template <class Go>
void bias_add(Go& go, float* out, const float* bias, int64_t N, int64_t C) {
  if (N * C > 0)
    go(LOOM_KERNEL(bias_add_k), by4(N * C), out, bias, N, C,
       C % 4 == 0 && aligned(out) && aligned(bias));
}
// dbias[c] += sum_r dout[r, c]
template <class Go>
void bias_bwd(Go& go, float* dbias, const float* dout, int64_t N, int64_t C) {
  columns::add_sums(go, dbias, columns::Plain{dout, C}, N, C);
}
template <class Go>
void embedding_fwd(Go& go, float* out, const int32_t* tok, const float* wte, const float* wpe,
                   int64_t B, int64_t T, int64_t C) {
  if (B * T * C > 0)
    go(LOOM_KERNEL(embedding_fwd_k), by1(B * T * C), out, tok, wte, wpe, B * T, T, C);
}
template <class Go>
void embedding_bwd(Go& go, float* dwte, float* dwpe, const float* dout, const int32_t* tok,
                   int64_t B, int64_t T, int64_t C) {
  if (B * T * C > 0)
    go(LOOM_KERNEL(embedding_bwd_k), by1(B * T * C), dwte, dwpe, dout, tok, B * T, T, C);
}
template <class Go>
void swiglu_fwd(Go& go, float* out, const float* inp, int64_t N, int64_t F) {
  if (N * F > 0) go(LOOM_KERNEL(swiglu_fwd_k), by1(N * F), out, inp, N, F);
}
template <class Go>
void swiglu_bwd(Go& go, float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  if (N * F > 0) go(LOOM_KERNEL(swiglu_bwd_k), by1(N * F), dinp, inp, dout, N, F);
}

}  // namespace loom::cuda::elementwise
