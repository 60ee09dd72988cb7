// The candidates for bf16 GEMMs on the CPU (issue #53 asks to choose with numbers): one GPT
// block's GEMMs, forward and backward, through
//   - Loom's fp32 GEMM (ops/cpu/gemm.cpp), the baseline;
//   - oneDNN's matmul on bf16 operands with an fp32 result, which dispatches to AMX or
//     AVX512-BF16 where the CPU has them (Debian's libdnnl 2.6), in one call (ONEDNN_MAX_CPU_ISA
//     =AVX512_CORE_BF16 measures the AVX512-BF16 kernel on a CPU with AMX);
//   - Loom's bf16 GEMM (ops/cpu/gemm_bf16.cpp: that matmul, cut into single-threaded calls so
//     its bits do not depend on the thread count), what a bf16 run uses;
//   - oneDNN's matmul on fp32 operands under fpmath_mode bf16 (it may round them to bf16 inside).
// Debian's OpenBLAS 0.3.21 has no sbgemm, so it is no candidate. bench/gemm_bf16.sh runs this
// beside PyTorch's bf16 and fp32 matmuls on the same shapes.
//   bench_gemm_bf16 [--threads N] [--d D] [--tokens T]
#include <cstdio>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <set>
#include <string>
#include <vector>

#include "gemm_shapes.hpp"
#include "ops/cpu/kernels.hpp"

namespace {

using loom::bench::best_seconds;
using loom::bench::flag;
using loom::bench::GemmShape;

using dnnl::memory;

// op(X) of a row-major [rows, cols] matrix stored transposed when `t`: strides of the [r, c] view.
memory::desc view(int64_t r, int64_t c, int t, memory::data_type dt) {
  return memory::desc({r, c}, dt, t ? memory::dims{1, r} : memory::dims{c, 1});
}

// One matmul of `s` on operands of type `in`, fp32 result, timed.
double onednn_seconds(const GemmShape& s, memory::data_type in, bool fpmath_bf16, dnnl::engine& eng,
                      dnnl::stream& strm, std::string& impl) {
  const auto a = view(s.M, s.K, s.ta, in), b = view(s.K, s.N, s.tb, in),
             c = memory::desc({s.M, s.N}, memory::data_type::f32, memory::dims{s.N, 1});
  dnnl::primitive_attr attr;
  if (fpmath_bf16) attr.set_fpmath_mode(dnnl::fpmath_mode::bf16);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, eng);
  memory A(pd.src_desc(), eng), B(pd.weights_desc(), eng), C(pd.dst_desc(), eng);
  std::memset(A.get_data_handle(), 0x3f, pd.src_desc().get_size());  // a finite value either way
  std::memset(B.get_data_handle(), 0x3f, pd.weights_desc().get_size());
  impl = pd.impl_info_str();  // the kernel oneDNN chose: brg:avx512_core_amx, ...
  dnnl::matmul mm(pd);
  return best_seconds([&] {
    mm.execute(strm, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
    strm.wait();
  });
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = loom::cpu::set_threads(static_cast<int>(flag(argc, argv, "--threads", 2)));
  const int64_t d = flag(argc, argv, "--d", 384), tokens = flag(argc, argv, "--tokens", 2048);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::printf("d %lld, %lld tokens, %d threads; oneDNN %d.%d.%d\n", static_cast<long long>(d),
              static_cast<long long>(tokens), threads, dnnl_version()->major, dnnl_version()->minor,
              dnnl_version()->patch);
  std::printf(
      "  op    M     N     K   fp32 Loom   bf16 oneDNN   bf16 Loom   fp32 fpmath=bf16  "
      "(GFLOP/s)\n");
  double fp32_s = 0, bf16_s = 0, loom16_s = 0, fpmath_s = 0;
  std::set<std::string> impls;
  for (const GemmShape& s : loom::bench::block_gemms(d, tokens, 0)) {
    std::vector<float> A(s.M * s.K, 0.5f), B(s.K * s.N, 0.25f), C(s.M * s.N, 0.f);
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    const double loom = best_seconds([&] {
      loom::cpu::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(),
                      s.N);
    });
    std::vector<uint16_t> A16(A.size()), B16(B.size());
    loom::cpu::to_bf16(A16.data(), A.data(), static_cast<int64_t>(A.size()));
    loom::cpu::to_bf16(B16.data(), B.data(), static_cast<int64_t>(B.size()));
    const double loom16 = best_seconds([&] {
      loom::cpu::gemm_typed(s.ta, s.tb, s.M, s.N, s.K, 1.f, A16.data(), LOOM_BF16, lda, B16.data(),
                            LOOM_BF16, ldb, 0.f, C.data(), s.N);
    });
    std::string bf16_impl, fpmath_impl;
    const double bf16 = onednn_seconds(s, memory::data_type::bf16, false, eng, strm, bf16_impl);
    const double fpmath = onednn_seconds(s, memory::data_type::f32, true, eng, strm, fpmath_impl);
    impls.insert("bf16: " + bf16_impl), impls.insert("fp32 fpmath=bf16: " + fpmath_impl);
    const double gflop = 2.0 * static_cast<double>(s.M) * s.N * s.K / 1e9;
    std::printf("  %c%c %5lld %5lld %5lld   %9.1f   %11.1f   %9.1f   %16.1f\n", s.ta ? 'T' : 'N',
                s.tb ? 'T' : 'N', static_cast<long long>(s.M), static_cast<long long>(s.N),
                static_cast<long long>(s.K), gflop / loom, gflop / bf16, gflop / loom16,
                gflop / fpmath);
    fp32_s += loom, bf16_s += bf16, loom16_s += loom16, fpmath_s += fpmath;
  }
  std::printf(
      "all: fp32 Loom %.2f ms, bf16 oneDNN %.2f ms, bf16 Loom %.2f ms, fp32 fpmath=bf16 %.2f ms; "
      "bf16 time / fp32's: %.2f (Loom's bf16: %.2f)\n",
      fp32_s * 1e3, bf16_s * 1e3, loom16_s * 1e3, fpmath_s * 1e3, bf16_s / fp32_s,
      loom16_s / fp32_s);
  for (const std::string& i : impls) std::printf("oneDNN kernel, %s\n", i.c_str());
}
