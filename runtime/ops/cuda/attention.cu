// The attention entries of the CUDA op table: kernels/attention.cuh's launch sequences on the
// device. Positions (qpos, kpos) may be host arrays (the contract's): uploaded when they are.
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/kernels/attention.cuh"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

void attention_block_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                         int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                         int64_t Hkv, int64_t D, const int64_t* qpos, const int64_t* kpos) {
  run_op([&](DeviceGo& go) {
    attention::block_fwd(go, out, lse, q, k, v, ldq, ldkv, B, Tq, Tk, H, Hkv, D, go.in(qpos, Tq),
                         go.in(kpos, Tk));
  });
}

void attention_block_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q,
                         const float* k, const float* v, const float* out, const float* lse,
                         int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                         int64_t Hkv, int64_t D, const int64_t* qpos, const int64_t* kpos) {
  run_op([&](DeviceGo& go) {
    attention::block_bwd(go, dq, dk, dv, dout, q, k, v, out, lse, ldq, ldkv, B, Tq, Tk, H, Hkv, D,
                         go.in(qpos, Tq), go.in(kpos, Tk));
  });
}

void attention_merge(float* out, float* lse, const float* part, const float* part_lse, int64_t B,
                     int64_t T, int64_t H, int64_t D) {
  run_op([&](DeviceGo& go) { attention::merge(go, out, lse, part, part_lse, B, T, H, D); });
}

void attention_gqa_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t D) {
  attention_block_fwd(out, lse, q, k, v, ldq, ldkv, B, T, T, H, Hkv, D, nullptr, nullptr);
}

void attention_gqa_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q,
                       const float* k, const float* v, const float* out, const float* lse,
                       int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t D) {
  attention_block_bwd(dq, dk, dv, dout, q, k, v, out, lse, ldq, ldkv, B, T, T, H, Hkv, D, nullptr,
                      nullptr);
}

// The multi-head layout: rows of [q (H*D) | k (H*D) | v (H*D)].
void attention_fwd(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H,
                   int64_t D) {
  const int64_t C = H * D;
  attention_gqa_fwd(out, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, H, H, D);
}

void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D;
  attention_gqa_bwd(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, out, lse, 3 * C,
                    3 * C, B, T, H, H, D);
}

}  // namespace loom::cuda
