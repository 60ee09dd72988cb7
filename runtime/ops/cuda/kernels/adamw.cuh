// AdamW over every parameter tensor in one launch (multi-tensor apply, as apex and PyTorch's
// foreach optimizers do it). The host cuts each tensor into chunks of kChunk elements and
// uploads the list; block b updates chunks b, b + gridDim.x, ...:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr ((m / c1) / (sqrt(v / c2) + eps) + wd p),  c1 = 1 - b1^t, c2 = 1 - b2^t
// (decoupled weight decay, Loshchilov and Hutter 2019), the CPU kernel's formula.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/cuda/device.cuh"

namespace loom::cuda::adam {

constexpr int64_t kChunk = 16384;
constexpr unsigned kMaxBlocks = 4096;

struct Chunk {
  float* p;
  const float* g;
  float *m, *v;
  int64_t n;
  float wd;
};
struct Hyper {
  float lr, b1, b2, eps, c1, c2;
};

__global__ void adamw_k(const Chunk* chunks, int64_t count, Hyper h) {
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const Chunk k = chunks[c];
    for (int64_t i = threadIdx.x; i < k.n; i += blockDim.x) {
      const float g = k.g[i], m = h.b1 * k.m[i] + (1.f - h.b1) * g,
                  v = h.b2 * k.v[i] + (1.f - h.b2) * g * g;
      k.m[i] = m, k.v[i] = v;
      k.p[i] -= h.lr * ((m / h.c1) / (sqrtf(v / h.c2) + h.eps) + k.wd * k.p[i]);
    }
  }
}

// Tensor t: params[t], grads[t], m[t], v[t] of numel[t] elements, weight decay wd[t].
template <class Go>
void run(Go& go, int64_t count, float* const* params, const float* const* grads, float* const* m,
         float* const* v, const int64_t* numel, const float* wd, float lr, float b1, float b2,
         float eps, int64_t step) {
  std::vector<Chunk> chunks;
  for (int64_t t = 0; t < count; ++t)
    for (int64_t at = 0; at < numel[t]; at += kChunk)
      chunks.push_back({params[t] + at, grads[t] + at, m[t] + at, v[t] + at,
                        numel[t] - at < kChunk ? numel[t] - at : kChunk, wd[t]});
  if (chunks.empty()) return;
  const Hyper h{lr,
                b1,
                b2,
                eps,
                1.f - std::pow(b1, static_cast<float>(step)),
                1.f - std::pow(b2, static_cast<float>(step))};
  const int64_t n = static_cast<int64_t>(chunks.size());
  const Chunk* list = go.upload(chunks.data(), n);
  go(LOOM_KERNEL(adamw_k),
     Shape{dim3(n < kMaxBlocks ? static_cast<unsigned>(n) : kMaxBlocks), dim3(kBlock)}, list, n, h);
}

}  // namespace loom::cuda::adam
