// Element access for kernels written once over fp32 and bf16 storage: a bf16 value is widened
// as it is loaded (its bits are fp32's upper half) and a result rounded to nearest-even once as
// it is stored, so the arithmetic between is fp32's whatever the tensors hold.
#pragma once

#include <loom/ops.h>

#include <cstdint>
#include <loom/bf16.hpp>

namespace loom::cpu {

inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const uint16_t* p, int64_t i) { return sdk::bf16_to_f32(p[i]); }
inline void put(float* p, int64_t i, float v) { p[i] = v; }
inline void put(uint16_t* p, int64_t i, float v) { p[i] = sdk::f32_to_bf16(v); }

// Calls f with r's storage: float* for fp32, uint16_t* for bf16 (the typed table checked which).
template <class F>
void with(loom_ref r, F&& f) {
  if (r.dtype == LOOM_BF16) return f(static_cast<uint16_t*>(r.data));
  f(static_cast<float*>(r.data));
}
template <class F>
void with(loom_cref r, F&& f) {
  if (r.dtype == LOOM_BF16) return f(static_cast<const uint16_t*>(r.data));
  f(static_cast<const float*>(r.data));
}

// Calls f with the storage of a backward's dinp, inp and dout.
template <class F>
void with(loom_ref dinp, loom_cref inp, loom_cref dout, F&& f) {
  with(dinp, [&](auto* dx) {
    with(inp, [&](const auto* x) { with(dout, [&](const auto* dy) { f(dx, x, dy); }); });
  });
}

}  // namespace loom::cpu
