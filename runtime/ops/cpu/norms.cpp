// LayerNorm and RMSNorm on fp32 or bf16 storage: each kernel is written once over its tensors'
// element types (a bf16 value widened as it is loaded, a result rounded once as it is stored), so
// a bf16 form gives the bits of the fp32 kernel on the widened values. Parameters, their
// gradients and the row statistics are fp32.
//
// The row statistics are sums over C. A serial float sum is one long dependency chain the
// compiler may not reorder; lane_sum keeps 8 sums in one vector (element c in lane c % 8) and
// folds them pairwise. The order depends on C alone: not on threads, layout, or where the row
// lies in memory (a vectoriser's own alignment peel would move elements between lanes, and the
// same row in two buffers would normalise to different bits), so every layout gets the same bits.
#include <cmath>
#include <cstring>

#include "ops/cpu/column_reduce.hpp"
#include "ops/cpu/kernels.hpp"
#include "ops/cpu/storage.hpp"

namespace loom::cpu {

namespace {

using Lanes = float __attribute__((vector_size(32)));
using Halves = uint16_t __attribute__((vector_size(16)));
using Words = uint32_t __attribute__((vector_size(32)));

// Elements c..c+7 of p as one vector (any alignment; bf16 widened: its bits are fp32's upper
// half), or element c alone.
struct Eight {
  Lanes operator()(const float* p, int64_t c) const {
    Lanes v;
    std::memcpy(&v, p + c, sizeof v);
    return v;
  }
  Lanes operator()(const uint16_t* p, int64_t c) const {
    Halves h;
    std::memcpy(&h, p + c, sizeof h);
    const Words u = __builtin_convertvector(h, Words) << 16;
    Lanes v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
};
struct One {
  template <class T>
  float operator()(const T* p, int64_t c) const {
    return load(p, c);
  }
};

// sum over c < C of f(load, c), f written once for a vector of 8 elements and for one.
template <class F>
float lane_sum(int64_t C, F f) {
  Lanes acc = {};
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) acc += f(Eight{}, c);
  float a[8];
  std::memcpy(a, &acc, sizeof a);
  for (; c < C; ++c) a[c % 8] += f(One{}, c);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

}  // namespace

constexpr float kNormEps = 1e-5f;

// mean = sum(x)/C, var = sum((x-mean)^2)/C, rstd = 1/sqrt(var + eps)
// out = (x - mean) * rstd * w + b
template <class O, class I>
void layernorm_fwd_t(O* out, float* mean, float* rstd, const I* inp, const float* w, const float* b,
                     int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const I* x = inp + i * C;
    float m = lane_sum(C, [x](auto ld, int64_t c) { return ld(x, c); }) / C;
    float v = lane_sum(C, [x, m](auto ld, int64_t c) { return (ld(x, c) - m) * (ld(x, c) - m); });
    float r = 1.f / std::sqrt(v / C + eps);
    O* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) put(o, c, (load(x, c) - m) * r * w[c] + (b ? b[c] : 0.f));
    mean[i] = m;
    rstd[i] = r;
  }
}

void layernorm_fwd_eps(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t N, int64_t C, float eps) {
  layernorm_fwd_t(out, mean, rstd, inp, w, b, N, C, eps);
}

void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w,
                   const float* b, int64_t N, int64_t C) {
  layernorm_fwd_eps(out, mean, rstd, inp, w, b, N, C, kNormEps);
}

// xhat = (x - mean) * rstd, g = dout * w
// dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)); dw += dout * xhat; db += dout (db may be
// null)
template <class O, class D, class I>
void layernorm_bwd_t(O* dinp, float* dw, float* db, const D* dout, const I* inp, const float* w,
                     const float* mean, const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const I* x = inp + i * C;
    const D* d = dout + i * C;
    float m = mean[i], r = rstd[i];
    const float g_mean =
        lane_sum(C, [d, w](auto ld, int64_t c) { return ld(d, c) * ld(w, c); }) / C;
    const float gx_mean =
        lane_sum(C, [d, w, x, m, r](
                        auto ld, int64_t c) { return ld(d, c) * ld(w, c) * (ld(x, c) - m) * r; }) /
        C;
    O* dx = dinp + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      float xhat = (load(x, c) - m) * r;
      put(dx, c, r * (load(d, c) * w[c] - g_mean - xhat * gx_mean));
    }
  }
  column_reduce<2>(N, C, {dw, db}, [&](int64_t i, int64_t c) {
    float d = load(dout, i * C + c);
    return std::array<float, 2>{d * (load(inp, i * C + c) - mean[i]) * rstd[i], d};
  });
}

void layernorm_bwd(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                   const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  layernorm_bwd_t(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

// rstd = 1/sqrt(mean(x^2) + eps), out = x * rstd * w
template <class O, class I>
void rmsnorm_fwd_t(O* out, float* rstd, const I* inp, const float* w, int64_t N, int64_t C,
                   float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const I* x = inp + i * C;
    const float ss = lane_sum(C, [x](auto ld, int64_t c) { return ld(x, c) * ld(x, c); });
    float r = 1.f / std::sqrt(ss / C + eps);
    O* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) put(o, c, load(x, c) * r * w[c]);
    rstd[i] = r;
  }
}

void rmsnorm_fwd_eps(float* out, float* rstd, const float* inp, const float* w, int64_t N,
                     int64_t C, float eps) {
  rmsnorm_fwd_t(out, rstd, inp, w, N, C, eps);
}

void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C) {
  rmsnorm_fwd_eps(out, rstd, inp, w, N, C, kNormEps);
}

// xhat = x * rstd, g = dout * w
// dinp = rstd * (g - xhat * mean(g * xhat)); dw += dout * xhat
template <class O, class D, class I>
void rmsnorm_bwd_t(O* dinp, float* dw, const D* dout, const I* inp, const float* w,
                   const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const I* x = inp + i * C;
    const D* d = dout + i * C;
    float r = rstd[i];
    const float gx_mean =
        lane_sum(C,
                 [d, w, x, r](auto ld, int64_t c) { return ld(d, c) * ld(w, c) * ld(x, c) * r; }) /
        C;
    O* dx = dinp + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) put(dx, c, r * (load(d, c) * w[c] - load(x, c) * r * gx_mean));
  }
  column_reduce<1>(N, C, {dw}, [&](int64_t i, int64_t c) {
    return std::array<float, 1>{load(dout, i * C + c) * load(inp, i * C + c) * rstd[i]};
  });
}

void rmsnorm_bwd(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                 const float* rstd, int64_t N, int64_t C) {
  rmsnorm_bwd_t(dinp, dw, dout, inp, w, rstd, N, C);
}

// The typed forms: each tensor fp32 or bf16.
void layernorm_fwd(loom_ref out, float* mean, float* rstd, loom_cref inp, const float* w,
                   const float* b, int64_t N, int64_t C, float eps) {
  with(out, [&](auto* o) {
    with(inp, [&](const auto* x) { layernorm_fwd_t(o, mean, rstd, x, w, b, N, C, eps); });
  });
}
void layernorm_bwd(loom_ref dinp, float* dw, float* db, loom_cref dout, loom_cref inp,
                   const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  with(dinp, inp, dout, [&](auto* dx, const auto* x, const auto* dy) {
    layernorm_bwd_t(dx, dw, db, dy, x, w, mean, rstd, N, C);
  });
}
void rmsnorm_fwd(loom_ref out, float* rstd, loom_cref inp, const float* w, int64_t N, int64_t C,
                 float eps) {
  with(out, [&](auto* o) {
    with(inp, [&](const auto* x) { rmsnorm_fwd_t(o, rstd, x, w, N, C, eps); });
  });
}
void rmsnorm_bwd(loom_ref dinp, float* dw, loom_cref dout, loom_cref inp, const float* w,
                 const float* rstd, int64_t N, int64_t C) {
  with(dinp, inp, dout, [&](auto* dx, const auto* x, const auto* dy) {
    rmsnorm_bwd_t(dx, dw, dy, x, w, rstd, N, C);
  });
}

}  // namespace loom::cpu
