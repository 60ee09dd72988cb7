// The GEMM entry through cuBLASLt in exact fp32 (CUBLAS_COMPUTE_32F, no TF32): the table's
// row-major C = alpha op(A) op(B) + beta C is cuBLAS's column-major C^T = op(B)^T op(A)^T, so the
// operands swap places and each keeps its own transpose flag.
#include <cublasLt.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/memory.hpp"

namespace loom::cuda {

namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt: ") + what + " failed (status " +
                             std::to_string(static_cast<int>(s)) + ")");
}

constexpr size_t kWorkspace = 32u << 20;

struct Lt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  Lt() {
    check(cublasLtCreate(&handle), "cublasLtCreate");
    workspace = device_alloc(kWorkspace);
  }
};
Lt& lt() {
  static Lt l;
  return l;
}

// A stored row-major matrix of `rows` x `cols` (row stride ld) seen column-major: cols x rows.
cublasLtMatrixLayout_t layout(int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  check(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, static_cast<uint64_t>(cols),
                                   static_cast<uint64_t>(rows), ld),
        "cublasLtMatrixLayoutCreate");
  return l;
}

// The largest power of two (up to 256) dividing the address.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 4 && a % align != 0) align /= 2;
  return align;
}

}  // namespace

void gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  Lt& l = lt();
  cublasLtMatmulDesc_t desc = nullptr;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  // First cuBLAS operand: B as stored (K x N, or N x K when transposed), flag kept.
  const cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                          tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
        "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
        "set TRANSB");
  cublasLtMatrixLayout_t lb = trans_b ? layout(N, K, ldb) : layout(K, N, ldb);
  cublasLtMatrixLayout_t la = trans_a ? layout(K, M, lda) : layout(M, K, lda);
  cublasLtMatrixLayout_t lc = layout(M, N, ldc);
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &kWorkspace, sizeof kWorkspace),
        "set workspace");
  // The model passes interior pointers (an expert's slice, a row block): ask only for
  // algorithms that accept each operand's actual alignment.
  const uint32_t align_a = alignment(B), align_b = alignment(A), align_c = alignment(C);
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &align_a, sizeof align_a),
        "set alignment");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &align_b, sizeof align_b),
        "set alignment");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &align_c, sizeof align_c),
        "set alignment");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &align_c, sizeof align_c),
        "set alignment");
  cublasLtMatmulHeuristicResult_t algo{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(l.handle, desc, lb, la, lc, lc, pref, 1, &algo, &found),
        "heuristic");
  if (found == 0) throw std::runtime_error("cuBLASLt: no fp32 algorithm for this GEMM shape");
  check(cublasLtMatmul(l.handle, desc, &alpha, B, lb, A, la, &beta, C, lc, C, lc, &algo.algo,
                       l.workspace, kWorkspace, stream()),
        "cublasLtMatmul");
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatmulDescDestroy(desc);
}

}  // namespace loom::cuda
