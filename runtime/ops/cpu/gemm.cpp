#ifdef LOOM_CPU_GEMM_ONEDNN
#include <dnnl.h>

#include "core/errors.hpp"
#include "ops/cpu/gemm_tiles.hpp"
#else
#include <cblas.h>
#endif

#include <string>

#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

#ifdef LOOM_CPU_GEMM_ONEDNN
namespace {

// One oneDNN call on the calling thread alone.
int sgemm_serial(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const tiles::AsyncSignalsHeld held;
  const tiles::OneThread one;
  return dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace
#endif

// C = alpha * op(A) @ op(B) + beta * C, row-major, transposes handled by the library without
// copies. With oneDNN (CMake's LOOM_CPU_GEMM; auto takes it when installed), the GEMM is cut into
// single-threaded calls as gemm_tiles.hpp says, so a result does not depend on the thread count.
// OpenBLAS, the other choice, splits only M and N.
void gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
#ifdef LOOM_CPU_GEMM_ONEDNN
  const int status = tiles::run(sgemm_serial, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K,
                                alpha, A, lda, B, ldb, beta, C, ldc);
  if (status != dnnl_success)  // only for arguments no caller should pass (a short leading side)
    throw RuntimeError("oneDNN sgemm failed (status " + std::to_string(status) + ") at M " +
                       std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
#else
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
#endif
}

const char* gemm_library() {
  static const std::string name = [] {
#ifdef LOOM_CPU_GEMM_ONEDNN
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch);
#else
    // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64": the name, the version.
    const std::string config = openblas_get_config();
    const size_t second_space = config.find(' ', config.find(' ') + 1);
    return config.substr(0, second_space);
#endif
  }();
  return name.c_str();
}

}  // namespace loom::cpu
