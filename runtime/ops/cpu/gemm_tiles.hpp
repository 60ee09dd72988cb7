// How the CPU GEMMs (fp32 and bf16, both oneDNN's) cut one GEMM into single-threaded library calls
// spread over the OpenMP team. The cuts depend on the shape and the machine alone, never on the
// thread count, so a result has the same bits with 1 thread or 16 ([run] threads = 0 changes the
// count during a run; oneDNN's own threading split K at 8 and 16 threads for some shapes):
//   - C is cut into tiles: each of its sides of at least 2 min_block() into pieces of at least
//     min_block() (at most 16);
//   - where K is the longest side and C too small to cut (a weight gradient), K is cut instead,
//     into chunks of at least min_block() whose products are added in a fixed order.
// A piece is one call of `serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)` on the
// operands' element type T (row-major, 'N' or 'T'), returning 0 on success.
#pragma once

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <vector>

namespace loom::cpu::tiles {

// A GEMM below this many multiply-adds runs as one call: threads would cost more than they save.
constexpr int64_t kSerialWork = int64_t{1} << 20;
// Rows, columns or K per block, at least: 1024 on a machine of 2 cores, down to 256 from 8 cores
// up, so that a bigger machine gets a piece for each core. The figure depends on the cores the
// process may use, never on how many threads it runs. oneDNN's single-threaded kernel keeps its
// speed on blocks of 1024 (2 Xeon threads: a GPT block's GEMMs at d 384 as fast as under
// oneDNN's own threading) and loses some on smaller ones (2048 x 1536 x 384 in blocks of 256
// rows: 228 GFLOP/s against 337).
inline int64_t min_block() {
  static const int64_t size =
      std::clamp<int64_t>(2048 / std::max(1, omp_get_num_procs()), 256, 1024);
  return size;
}
constexpr int64_t kMaxBlocks = 16;  // along each cut side
// Floats of scratch the K chunks may take beyond C (64 MiB): a GEMM with a small C gets every
// chunk, one whose C is near 2 min_block() squared gets fewer.
constexpr int64_t kMaxScratch = int64_t{16} << 20;

inline int64_t block_count(int64_t side) {
  return std::clamp<int64_t>(side / min_block(), 1, kMaxBlocks);
}

// oneDNN 2.6's JIT GEMM kernels point the stack pointer into the heap while they run (oneDNN
// issue 4845, fixed upstream in March 2026, after Debian 12's 2.6.3): a signal handled on that
// thread meanwhile writes its frame over the heap. Loom handles SIGTERM, SIGINT and SIGHUP (a
// preempted run saves its step), and with them 1 run in 5 here died in free(). So the thread
// blocks asynchronous signals for the call; one that comes meanwhile is handled when it returns.
// Faults (SIGSEGV and the like) stay unblocked: blocked, they would end the process unreported.
class AsyncSignalsHeld {
 public:
  AsyncSignalsHeld() {
    sigset_t held;
    sigfillset(&held);
    for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT}) sigdelset(&held, fault);
    pthread_sigmask(SIG_BLOCK, &held, &before_);
  }
  ~AsyncSignalsHeld() { pthread_sigmask(SIG_SETMASK, &before_, nullptr); }
  AsyncSignalsHeld(const AsyncSignalsHeld&) = delete;
  AsyncSignalsHeld& operator=(const AsyncSignalsHeld&) = delete;

 private:
  sigset_t before_;
};

// The calling thread's OpenMP thread count is 1 while it lives: oneDNN reads it, at a primitive's
// creation and at each call, to decide how many threads a call uses.
class OneThread {
 public:
  OneThread() : threads_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(threads_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int threads_;
};

// C cut into row_blocks x col_blocks tiles, one call each, spread over the team. No tile is
// empty: a side is cut into at most side / min_block() pieces, so the last one starts inside it.
template <class T, class Serial>
int run_tiles(const Serial& serial, int64_t row_blocks, int64_t col_blocks, char ta, char tb,
              int64_t M, int64_t N, int64_t K, float alpha, const T* A, int64_t lda, const T* B,
              int64_t ldb, float beta, float* C, int64_t ldc) {
  const int64_t rows = (M + row_blocks - 1) / row_blocks, cols = (N + col_blocks - 1) / col_blocks;
  int failed = 0;  // an exception may not leave an OpenMP region
#pragma omp parallel for schedule(static) collapse(2) reduction(max : failed)
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t i = rb * rows, j = cb * cols;
      const int64_t m = std::min(rows, M - i), n = std::min(cols, N - j);
      const T* a = ta == 'T' ? A + i : A + i * lda;  // rows i..i+m of op(A)
      const T* b = tb == 'T' ? B + j * ldb : B + j;  // columns j..j+n of op(B)
      failed = std::max(failed,
                        serial(ta, tb, m, n, K, alpha, a, lda, b, ldb, beta, C + i * ldc + j, ldc));
    }
  }
  return failed;
}

// K cut into `chunks`: chunk 0 goes into C with beta, chunk c > 0 into its own scratch matrix
// P_c, and then C += P_1 + P_2 + ... in that order. No chunk is empty, for the reason no tile is.
template <class T, class Serial>
int run_chunks(const Serial& serial, int64_t chunks, char ta, char tb, int64_t M, int64_t N,
               int64_t K, float alpha, const T* A, int64_t lda, const T* B, int64_t ldb, float beta,
               float* C, int64_t ldc) {
  const int64_t size = (K + chunks - 1) / chunks;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>((chunks - 1) * M * N));
  float* P = scratch.data();
  int failed = 0;
#pragma omp parallel for schedule(static) reduction(max : failed)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = c * size, n = std::min(size, K - first);
    const T* a = ta == 'T' ? A + first * lda : A + first;  // columns of op(A)
    const T* b = tb == 'T' ? B + first : B + first * ldb;  // rows of op(B)
    const int status =
        c == 0 ? serial(ta, tb, M, N, n, alpha, a, lda, b, ldb, beta, C, ldc)
               : serial(ta, tb, M, N, n, alpha, a, lda, b, ldb, 0.f, P + (c - 1) * M * N, N);
    failed = std::max(failed, status);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    float* row = C + i * ldc;
    for (int64_t c = 1; c < chunks; ++c) {
      const float* p = P + (c - 1) * M * N + i * N;
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) row[j] += p[j];
    }
  }
  return failed;
}

// C = alpha op(A) op(B) + beta C by the cuts above. Inside any parallel region, even one of a
// single thread, one whole call: a caller's team of one thread and of two must get the same bits.
template <class T, class Serial>
int run(const Serial& serial, char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
        const T* A, int64_t lda, const T* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const bool small = M * N * K < kSerialWork || omp_get_level() > 0;
  if (small || std::max({M, N, K}) < 2 * min_block())
    return serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (K > std::max(M, N) && block_count(M) * block_count(N) == 1)
    return run_chunks(serial, std::min(block_count(K), 1 + kMaxScratch / (M * N)), ta, tb, M, N, K,
                      alpha, A, lda, B, ldb, beta, C, ldc);
  return run_tiles(serial, block_count(M), block_count(N), ta, tb, M, N, K, alpha, A, lda, B, ldb,
                   beta, C, ldc);
}

}  // namespace loom::cpu::tiles
