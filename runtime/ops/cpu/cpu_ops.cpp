#include <omp.h>

#include <cstdlib>
#include <cstring>

#include <cblas.h>

#include "ops/cpu/kernels.hpp"
#include "ops/ops.hpp"

namespace loom::cpu {

int set_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  return n;
}

}  // namespace loom::cpu

namespace loom::ops {

const loom_ops* cpu() {
  static const loom_ops table = [] {
    loom_ops t{};
    t.v = LOOM_VERSION_OF(loom_ops);
    t.device = {LOOM_DEVICE_CPU, 0};
    t.gemm = &cpu::gemm;
    t.embedding_fwd = &cpu::embedding_fwd;
    t.embedding_bwd = &cpu::embedding_bwd;
    t.layernorm_fwd = &cpu::layernorm_fwd;
    t.layernorm_bwd = &cpu::layernorm_bwd;
    t.rmsnorm_fwd = &cpu::rmsnorm_fwd;
    t.rmsnorm_bwd = &cpu::rmsnorm_bwd;
    t.bias_add = &cpu::bias_add;
    t.bias_bwd = &cpu::bias_bwd;
    t.gelu_fwd = &cpu::gelu_fwd;
    t.gelu_bwd = &cpu::gelu_bwd;
    t.swiglu_fwd = &cpu::swiglu_fwd;
    t.swiglu_bwd = &cpu::swiglu_bwd;
    t.attention_fwd = &cpu::attention_fwd;
    t.attention_bwd = &cpu::attention_bwd;
    t.add = &cpu::add;
    t.accumulate = &cpu::accumulate;
    t.scale = &cpu::scale;
    t.sum_squares = &cpu::sum_squares;
    t.softmax_xent = &cpu::softmax_xent;
    t.adamw = &cpu::adamw;
    t.quantize = &cpu::quantize;
    t.layernorm_fwd_eps = &cpu::layernorm_fwd_eps;
    t.rmsnorm_fwd_eps = &cpu::rmsnorm_fwd_eps;
    t.attention_gqa_fwd = &cpu::attention_gqa_fwd;
    t.attention_gqa_bwd = &cpu::attention_gqa_bwd;
    t.rope_fwd = &cpu::rope_fwd;
    t.rope_bwd = &cpu::rope_bwd;
    t.attention_block_fwd = &cpu::attention_block_fwd;
    t.attention_block_bwd = &cpu::attention_block_bwd;
    t.attention_merge = &cpu::attention_merge;
    t.gelu_erf_fwd = &cpu::gelu_erf_fwd;
    t.gelu_erf_bwd = &cpu::gelu_erf_bwd;
    // The device contract on the host: every call is done when it returns, one stream.
    t.host_reachable = 1;
    t.copy = [](void* dst, const void* src, int64_t n) {
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n));
    };
    t.zero = [](void* dst, int64_t n) {
      if (n > 0) std::memset(dst, 0, static_cast<size_t>(n));
    };
    t.set_stream = [](int32_t) {};
    t.record_event = []() -> int64_t { return 0; };
    t.wait_event = [](int64_t) {};
    t.sync_event = [](int64_t) {};
    t.synchronize = [] {};
    t.pinned_alloc = [](int64_t n) -> void* { return std::aligned_alloc(64, (static_cast<size_t>(n > 0 ? n : 1) + 63) / 64 * 64); };
    t.pinned_free = [](void* p) { std::free(p); };
    return t;
  }();
  return &table;
}

}  // namespace loom::ops
