// A loom_ops_v2 table that times every kernel entry of another one and adds the time to the entry's
// op family, for bench/cpu_profile. On the CPU every entry is done when it returns, so a call's
// wall time is its kernel's (a device with queues would need events instead). Entries the base
// table lacks stay null, as the base's.
#pragma once

#include <loom/ops.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <string>

namespace loom::bench {

// The op families a step's time is split into, the order the tables print them in.
enum Family : int {
  kGemm,
  kAttention,
  kNorm,
  kActivation,
  kEmbedding,
  kLoss,
  kOptimizer,
  kElementwise,
  kFamilies
};
inline const char* family_name(int f) {
  static const char* names[] = {"gemm",      "attention", "norms",     "activation",
                                "embedding", "loss",      "optimizer", "elementwise+copies"};
  return names[f];
}

struct OpProfile {
  std::array<double, kFamilies> seconds{};
  std::array<long, kFamilies> calls{};
  void clear() { seconds.fill(0.0), calls.fill(0); }
};

inline OpProfile& op_profile() {
  static OpProfile p;
  return p;
}
inline const loom_ops_v2*& profiled_base() {
  static const loom_ops_v2* base = nullptr;
  return base;
}

// Entry `Field` of the base table, timed into `F`.
template <auto Field, int F>
struct Timed;
template <class R, class... A, R (*loom_ops_v2::*Field)(A...), int F>
struct Timed<Field, F> {
  static R call(A... a) {
    const auto t0 = std::chrono::steady_clock::now();
    struct Add {
      std::chrono::steady_clock::time_point t0;
      ~Add() {
        op_profile().seconds[F] +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++op_profile().calls[F];
      }
    } add{t0};
    return (profiled_base()->*Field)(a...);
  }
};

// `base` with its kernel entries timed (its device contract entries as they are). One base per
// process: the bench profiles one table.
inline loom_ops_v2 profiled(const loom_ops_v2* base) {
  profiled_base() = base;
  loom_ops_v2 t = *base;
#define LOOM_TIMED(field, family) \
  if (base->field) t.field = &Timed<&loom_ops_v2::field, family>::call
  LOOM_TIMED(gemm, kGemm);
  LOOM_TIMED(attention_fwd, kAttention);
  LOOM_TIMED(attention_bwd, kAttention);
  LOOM_TIMED(attention_gqa_fwd, kAttention);
  LOOM_TIMED(attention_gqa_bwd, kAttention);
  LOOM_TIMED(attention_block_fwd, kAttention);
  LOOM_TIMED(attention_block_bwd, kAttention);
  LOOM_TIMED(attention_merge, kAttention);
  LOOM_TIMED(rope_fwd, kAttention);
  LOOM_TIMED(rope_bwd, kAttention);
  LOOM_TIMED(layernorm_fwd, kNorm);
  LOOM_TIMED(layernorm_bwd, kNorm);
  LOOM_TIMED(layernorm_fwd_eps, kNorm);
  LOOM_TIMED(rmsnorm_fwd, kNorm);
  LOOM_TIMED(rmsnorm_bwd, kNorm);
  LOOM_TIMED(rmsnorm_fwd_eps, kNorm);
  LOOM_TIMED(gelu_fwd, kActivation);
  LOOM_TIMED(gelu_bwd, kActivation);
  LOOM_TIMED(gelu_erf_fwd, kActivation);
  LOOM_TIMED(gelu_erf_bwd, kActivation);
  LOOM_TIMED(swiglu_fwd, kActivation);
  LOOM_TIMED(swiglu_bwd, kActivation);
  LOOM_TIMED(embedding_fwd, kEmbedding);
  LOOM_TIMED(embedding_bwd, kEmbedding);
  LOOM_TIMED(softmax_xent, kLoss);
  LOOM_TIMED(adamw, kOptimizer);
  LOOM_TIMED(adamw_multi, kOptimizer);
  LOOM_TIMED(sum_squares, kOptimizer);  // the gradient norm
  LOOM_TIMED(sum_squares_multi, kOptimizer);
  LOOM_TIMED(bias_add, kElementwise);
  LOOM_TIMED(bias_bwd, kElementwise);
  LOOM_TIMED(add, kElementwise);
  LOOM_TIMED(accumulate, kElementwise);
  LOOM_TIMED(scale, kElementwise);
  LOOM_TIMED(copy, kElementwise);
  LOOM_TIMED(zero, kElementwise);
  LOOM_TIMED(quantize, kElementwise);  // narrow formats and wires
  LOOM_TIMED(to_bf16, kElementwise);
  LOOM_TIMED(from_bf16, kElementwise);
  LOOM_TIMED(encode_blocks, kElementwise);
  LOOM_TIMED(decode_blocks, kElementwise);
  LOOM_TIMED(row_max, kLoss);  // the vocab-parallel loss
  LOOM_TIMED(xent_stats, kLoss);
  LOOM_TIMED(xent_grad, kLoss);
  LOOM_TIMED(router_topk, kActivation);  // MoE routing, with the MLP it routes to
  LOOM_TIMED(router_topk_bwd, kActivation);
  LOOM_TIMED(gather_rows, kElementwise);
  LOOM_TIMED(combine_rows, kElementwise);
  LOOM_TIMED(combine_rows_bwd, kElementwise);
#undef LOOM_TIMED
  return t;
}

}  // namespace loom::bench
