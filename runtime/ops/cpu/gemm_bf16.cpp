// GEMMs on bf16 operands, through oneDNN's matmul primitive, which runs them on the CPU's AMX
// tiles (Sapphire Rapids and later). Each product of two bf16 values (8-bit significands) is exact
// in fp32, and the sums are fp32, so a bf16 GEMM equals the fp32 GEMM of the same values up to the
// order of the additions:
//   C[i, j] = alpha sum_k bf16(A)[i, k] bf16(B)[k, j] + beta C[i, j].
// bench/gemm_bf16.sh chose oneDNN with numbers (Xeon with AMX, 2 threads: one GPT block's GEMMs at
// d 384 in 13.8 ms against 70.9 ms in fp32; Debian's OpenBLAS 0.3.21 has no sbgemm). The same
// bench with oneDNN capped at AVX512-BF16 (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, the dot products
// of Cooper Lake and Zen 4) took 106 ms, 1.57x fp32's, so only AMX counts as bf16 instructions
// here. The GEMM is cut as gemm_tiles.hpp says, so its bits do not depend on the thread count.
// Without AMX, or without oneDNN 2, bf16 operands are widened to fp32 tile by tile and the fp32
// GEMM runs on them (gemm_widening): the emulation's bits at its speed (an L6 d384 step on a
// 2-core AMD EPYC: 1387 to 1588 ms against the emulation's 1432 to 1584), from half the memory.
// gemm_operand_dtypes() says 0 there, so the run says its bf16 has no speed.
#include <loom/bf16.hpp>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "ops/cpu/kernels.hpp"

// The matmul API used here (matmul::desc, output scales) is oneDNN 2's; oneDNN 3 replaced it.
// Debian 12's is 2.6.3 (scripts/install-deps.sh); a build on oneDNN 3 keeps bf16 emulated.
#ifdef LOOM_CPU_GEMM_ONEDNN
#include <oneapi/dnnl/dnnl_version.h>
#define LOOM_BF16_MATMUL (DNNL_VERSION_MAJOR == 2)
#else
#define LOOM_BF16_MATMUL 0
#endif

#if LOOM_BF16_MATMUL
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "ops/cpu/gemm_tiles.hpp"
#endif

namespace loom::cpu {

namespace {

#if LOOM_BF16_MATMUL
using dnnl::memory;

// The row-major [r, c] view of op(X), X stored transposed when `t` (leading side ld).
memory::desc view(int64_t r, int64_t c, char t, int64_t ld, memory::data_type dt) {
  return memory::desc({r, c}, dt, t == 'T' ? memory::dims{1, ld} : memory::dims{ld, 1});
}

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// A matmul primitive is compiled for one shape, strides, alpha and beta: each thread keeps the
// ones it has made (a run meets a few dozen shapes, every step the same ones), with the memory
// descriptors its calls wrap the operands in.
using Key =
    std::tuple<char, char, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;
struct Made {
  memory::desc a, b, c;
  dnnl::matmul mm;
};

Made& primitive(const Key& key) {
  thread_local std::map<Key, Made> made;
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  const auto [ta, tb, M, N, K, lda, ldb, ldc, alpha, beta] = key;
  const memory::data_type bf16 = memory::data_type::bf16;
  const auto a = view(M, K, ta, lda, bf16), b = view(K, N, tb, ldb, bf16),
             c = memory::desc({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  if (beta != 0.f) {
    dnnl::post_ops sum;
    sum.append_sum(beta);  // C = (alpha A B) + beta C
    attr.set_post_ops(sum);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
  return made.emplace(key, Made{a, b, c, dnnl::matmul(pd)}).first->second;
}

// One matmul on the calling thread alone; 0 on success (an exception may not leave the team).
int bf16_serial(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const tiles::AsyncSignalsHeld held;
  const tiles::OneThread one;
  try {
    Made& p = primitive({ta, tb, M, N, K, lda, ldb, ldc, alpha, beta});
    memory a(p.a, engine(), const_cast<uint16_t*>(A)), b(p.b, engine(), const_cast<uint16_t*>(B)),
        c(p.c, engine(), C);
    thread_local dnnl::stream stream(engine());
    p.mm.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
    return 0;
  } catch (const dnnl::error& e) {
    return e.status == dnnl_success ? 1 : static_cast<int>(e.status);
  }
}
#endif

// A [rows x cols] operand (row stride ld) as fp32, contiguous with the same row stride.
const float* widened(std::vector<float>& into, const void* X, int32_t dtype, int64_t rows,
                     int64_t ld, int64_t cols) {
  if (dtype == LOOM_F32) return static_cast<const float*>(X);
  if (dtype != LOOM_BF16)
    throw RuntimeError("gemm_typed on the CPU takes fp32 or bf16 operands, not dtype " +
                       std::to_string(dtype));
  return widen_strided(into, static_cast<const uint16_t*>(X), rows, ld, cols);
}

}  // namespace

uint32_t gemm_operand_dtypes() {
#if LOOM_BF16_MATMUL
  // oneDNN's own reading of the CPU (ONEDNN_MAX_CPU_ISA lowers it, as for a test of the fallback).
  const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  static const bool native = (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx;
  return native ? 1u << LOOM_BF16 : 0u;
#else
  return 0;
#endif
}

const char* bf16_instructions() { return gemm_operand_dtypes() ? "AMX" : nullptr; }

void gemm_typed(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const void* A, int32_t a_dtype, int64_t lda, const void* B, int32_t b_dtype,
                int64_t ldb, float beta, float* C, int64_t ldc) {
#if LOOM_BF16_MATMUL
  if (a_dtype == LOOM_BF16 && b_dtype == LOOM_BF16 && gemm_operand_dtypes()) {
    const int status = tiles::run(bf16_serial, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K,
                                  alpha, static_cast<const uint16_t*>(A), lda,
                                  static_cast<const uint16_t*>(B), ldb, beta, C, ldc);
    if (status != 0)
      throw RuntimeError("oneDNN bf16 matmul failed (status " + std::to_string(status) + ") at M " +
                         std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
    return;
  }
#endif
  if (a_dtype == LOOM_BF16 && b_dtype == LOOM_BF16)
    return gemm_widening(trans_a, trans_b, M, N, K, alpha, static_cast<const uint16_t*>(A), lda,
                         static_cast<const uint16_t*>(B), ldb, beta, C, ldc);
  thread_local std::vector<float> wide_a, wide_b;
  const float* a = widened(wide_a, A, a_dtype, trans_a ? K : M, lda, trans_a ? M : K);
  const float* b = widened(wide_b, B, b_dtype, trans_b ? N : K, ldb, trans_b ? K : N);
  gemm(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
}

}  // namespace loom::cpu
