// The GEMMs of one GPT block and of the LM head, forward and backward, through Loom's CPU GEMM
// (ops/cpu/gemm.cpp: oneDNN cut into blocks, or OpenBLAS, as the build chose) against OpenBLAS's
// own threading, in the same run: the figures behind CMake's LOOM_CPU_GEMM default.
//   bench_gemm_libraries [--threads N] [--d D] [--tokens T] [--vocab V]
// Per shape, GFLOP/s both ways; then the sum of the milliseconds and its ratio.
#include <cblas.h>

#include <cstdio>
#include <vector>

#include "gemm_shapes.hpp"
#include "ops/cpu/kernels.hpp"

using loom::bench::best_seconds;
using loom::bench::flag;
using loom::bench::GemmShape;

int main(int argc, char** argv) {
  const int threads = loom::cpu::set_threads(static_cast<int>(flag(argc, argv, "--threads", 2)));
  const int64_t d = flag(argc, argv, "--d", 384), tokens = flag(argc, argv, "--tokens", 2048),
                vocab = flag(argc, argv, "--vocab", 256);
  std::printf("d %lld, %lld tokens, vocab %lld, %d threads\n", static_cast<long long>(d),
              static_cast<long long>(tokens), static_cast<long long>(vocab), threads);
  std::printf("  op    M     N     K   Loom GFLOP/s   OpenBLAS GFLOP/s\n");
  double loom_s = 0, blas_s = 0;
  for (const GemmShape& s : loom::bench::block_gemms(d, tokens, vocab)) {
    std::vector<float> A(s.M * s.K, 0.5f), B(s.K * s.N, 0.25f), C(s.M * s.N, 0.f);
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    const double loom = best_seconds([&] {
      loom::cpu::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(),
                      s.N);
    });
    const double blas = best_seconds([&] {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(s.M), static_cast<int>(s.N), static_cast<int>(s.K), 1.f,
                  A.data(), static_cast<int>(lda), B.data(), static_cast<int>(ldb), 0.f, C.data(),
                  static_cast<int>(s.N));
    });
    const double flops = 2.0 * static_cast<double>(s.M) * s.N * s.K;
    std::printf("  %c%c %5lld %5lld %5lld   %12.1f   %16.1f\n", s.ta ? 'T' : 'N', s.tb ? 'T' : 'N',
                static_cast<long long>(s.M), static_cast<long long>(s.N),
                static_cast<long long>(s.K), flops / loom / 1e9, flops / blas / 1e9);
    loom_s += loom;
    blas_s += blas;
  }
  std::printf("all: Loom %.2f ms, OpenBLAS %.2f ms; OpenBLAS time / Loom's: %.2f\n", loom_s * 1e3,
              blas_s * 1e3, blas_s / loom_s);
}
