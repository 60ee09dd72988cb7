#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "ops/cpu/kernels.hpp"
#include "ops/kernel_entries.hpp"

namespace loom::cpu {

int set_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  return n;
}

const loom_ops_v2* op_table() {
  static const loom_ops_v2 table = [] {
    loom_ops_v2 t{};
    t.v = LOOM_OPS_V2_VERSION;
    t.device = {LOOM_DEVICE_CPU, 0};
    LOOM_OPS_KERNEL_ENTRIES(t, loom::cpu);
    t.gemm_operand_dtypes = gemm_operand_dtypes();
    t.quantize_into = &quantize_into;
    t.gemm_typed = &gemm_typed;
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
    t.pinned_alloc = [](int64_t n) -> void* {
      return std::aligned_alloc(64, (static_cast<size_t>(n > 0 ? n : 1) + 63) / 64 * 64);
    };
    t.pinned_free = [](void* p) { std::free(p); };
    return t;
  }();
  return &table;
}

}  // namespace loom::cpu
