#ifdef LOOM_CPU_GEMM_ONEDNN
#include <dnnl.h>

#include "core/errors.hpp"
#include "ops/cpu/gemm_tiles.hpp"
#else
#include <cblas.h>
#endif

#include <string>
#include <vector>

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

// rows x cols of X (row stride ld) widened into `into`, rows packed (row stride cols).
const float* widen_packed(std::vector<float>& into, const uint16_t* X, int64_t rows, int64_t ld,
                          int64_t cols) {
  into.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) from_bf16(into.data() + r * cols, X + r * ld, cols);
  return into.data();
}

// One tile of a GEMM on bf16 operands: its slices of op(A) (M x K) and op(B) (K x N) widened, then
// the fp32 call on them. The slices are what this tile reads, so a thread's scratch is bounded by
// its tile, not by the operands.
int widened_serial(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                   float* C, int64_t ldc) {
  thread_local std::vector<float> wa, wb;
  const int64_t a_rows = ta == 'T' ? K : M, a_cols = ta == 'T' ? M : K;
  const int64_t b_rows = tb == 'T' ? N : K, b_cols = tb == 'T' ? K : N;
  const float* a = widen_packed(wa, A, a_rows, lda, a_cols);
  const float* b = widen_packed(wb, B, b_rows, ldb, b_cols);
  return sgemm_serial(ta, tb, M, N, K, alpha, a, a_cols, b, b_cols, beta, C, ldc);
}

// Failures come only from arguments no caller should pass (a short leading side).
void check_status(int status, int64_t M, int64_t N, int64_t K) {
  if (status != dnnl_success)
    throw RuntimeError("oneDNN sgemm failed (status " + std::to_string(status) + ") at M " +
                       std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
}

}  // namespace
#endif

// A [rows x cols] bf16 operand (row stride ld) widened into `into`, from its first row to the last
// one's last column, so the row stride is kept.
const float* widen_strided(std::vector<float>& into, const uint16_t* X, int64_t rows, int64_t ld,
                           int64_t cols) {
  const int64_t n = rows <= 0 || cols <= 0 ? 0 : (rows - 1) * ld + cols;
  into.resize(static_cast<size_t>(n));
  from_bf16(into.data(), X, n);
  return into.data();
}

// C = alpha * op(A) @ op(B) + beta * C, row-major, transposes handled by the library without
// copies. With oneDNN (CMake's LOOM_CPU_GEMM; auto takes it when installed), the GEMM is cut into
// single-threaded calls as gemm_tiles.hpp says, so a result does not depend on the thread count.
// OpenBLAS, the other choice, splits only M and N.
void gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
#ifdef LOOM_CPU_GEMM_ONEDNN
  const int status = tiles::run(sgemm_serial, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K,
                                alpha, A, lda, B, ldb, beta, C, ldc);
  check_status(status, M, N, K);
#else
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
#endif
}

// The same GEMM on bf16 operands, for a CPU without bf16 instructions: oneDNN's cuts
// (gemm_tiles.hpp) with each tile's slices widened as it runs, so the bits are gemm's on the
// widened operands (the emulation's: bf16 values in fp32 storage) and the scratch is one tile's per
// thread. OpenBLAS's build widens the operands whole.
void gemm_widening(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                   float* C, int64_t ldc) {
#ifdef LOOM_CPU_GEMM_ONEDNN
  const int status = tiles::run(widened_serial, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K,
                                alpha, A, lda, B, ldb, beta, C, ldc);
  check_status(status, M, N, K);
#else
  std::vector<float> wa, wb;
  const float* a = widen_strided(wa, A, trans_a ? K : M, lda, trans_a ? M : K);
  const float* b = widen_strided(wb, B, trans_b ? N : K, ldb, trans_b ? K : N);
  gemm(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
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
