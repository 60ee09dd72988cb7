#ifdef LOOM_CPU_GEMM_ONEDNN
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <string>
#include <vector>

#include "core/errors.hpp"
#else
#include <cblas.h>
#endif

#include <string>

#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

#ifdef LOOM_CPU_GEMM_ONEDNN
namespace {

// A GEMM below this many multiply-adds runs as one call: threads would cost more than they save.
constexpr int64_t kSerialWork = int64_t{1} << 20;
// Rows, columns or K per block, at least: 1024 on a machine of 2 cores, down to 256 from 8 cores
// up, so that a bigger machine gets a piece for each core. The figure depends on the cores the
// process may use, never on how many threads it runs. oneDNN's single-threaded kernel keeps its
// speed on blocks of 1024 (2 Xeon threads: a GPT block's GEMMs at d 384 as fast as under
// oneDNN's own threading) and loses some on smaller ones (2048 x 1536 x 384 in blocks of 256
// rows: 228 GFLOP/s against 337).
int64_t min_block() {
  static const int64_t size =
      std::clamp<int64_t>(2048 / std::max(1, omp_get_num_procs()), 256, 1024);
  return size;
}
constexpr int64_t kMaxBlocks = 16;  // along each cut side
// Floats of scratch the K chunks may take beyond C (64 MiB): a GEMM with a small C gets every
// chunk, one whose C is near 2 min_block() squared gets fewer.
constexpr int64_t kMaxScratch = int64_t{16} << 20;

// oneDNN 2.6's JIT f32 GEMM kernels point the stack pointer into the heap while they run
// (oneDNN issue 4845, fixed upstream in March 2026, after Debian 12's 2.6.3): a signal handled on
// that thread meanwhile writes its frame over the heap. Loom handles SIGTERM, SIGINT and SIGHUP
// (a preempted run saves its step), and with them 1 run in 5 here died in free(). So the thread
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

// One oneDNN call on the calling thread alone: oneDNN reads the thread's OpenMP thread count.
dnnl_status_t sgemm_serial(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                           const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                           float* C, int64_t ldc) {
  const AsyncSignalsHeld held;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const dnnl_status_t status = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  omp_set_num_threads(threads);
  return status;
}

// oneDNN refuses only arguments no caller should pass (a negative size, a short leading side).
void check(int status, int64_t M, int64_t N, int64_t K) {
  if (status != dnnl_success)
    throw RuntimeError("oneDNN sgemm failed (status " + std::to_string(status) + ") at M " +
                       std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
}

int64_t block_count(int64_t side) { return std::clamp<int64_t>(side / min_block(), 1, kMaxBlocks); }

// C cut into row_blocks x col_blocks tiles, one call each, spread over the team. No tile is
// empty: a side is cut into at most side / min_block() pieces, so the last one starts inside it.
int sgemm_tiles(int64_t row_blocks, int64_t col_blocks, char ta, char tb, int64_t M, int64_t N,
                int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                float beta, float* C, int64_t ldc) {
  const int64_t rows = (M + row_blocks - 1) / row_blocks, cols = (N + col_blocks - 1) / col_blocks;
  int failed = dnnl_success;  // an exception may not leave an OpenMP region
#pragma omp parallel for schedule(static) collapse(2) reduction(max : failed)
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t i = rb * rows, j = cb * cols;
      const int64_t m = std::min(rows, M - i), n = std::min(cols, N - j);
      const float* a = ta == 'T' ? A + i : A + i * lda;  // rows i..i+m of op(A)
      const float* b = tb == 'T' ? B + j * ldb : B + j;  // columns j..j+n of op(B)
      const dnnl_status_t status =
          sgemm_serial(ta, tb, m, n, K, alpha, a, lda, b, ldb, beta, C + i * ldc + j, ldc);
      failed = std::max(failed, static_cast<int>(status));
    }
  }
  return failed;
}

// K cut into `chunks` (a weight gradient: K is the tokens, C is small): chunk 0 goes into C with
// beta, chunk c > 0 into its own scratch matrix P_c, and then C += P_1 + P_2 + ... in that order.
// No chunk is empty, for the reason no tile is.
int sgemm_chunks(int64_t chunks, char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
  const int64_t size = (K + chunks - 1) / chunks;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>((chunks - 1) * M * N));
  float* P = scratch.data();
  int failed = dnnl_success;
#pragma omp parallel for schedule(static) reduction(max : failed)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = c * size, n = std::min(size, K - first);
    const float* a = ta == 'T' ? A + first * lda : A + first;  // columns of op(A)
    const float* b = tb == 'T' ? B + first : B + first * ldb;  // rows of op(B)
    const dnnl_status_t status =
        c == 0 ? sgemm_serial(ta, tb, M, N, n, alpha, a, lda, b, ldb, beta, C, ldc)
               : sgemm_serial(ta, tb, M, N, n, alpha, a, lda, b, ldb, 0.f, P + (c - 1) * M * N, N);
    failed = std::max(failed, static_cast<int>(status));
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

}  // namespace
#endif

// C = alpha * op(A) @ op(B) + beta * C, row-major, transposes handled by the library without
// copies. With oneDNN (CMake's LOOM_CPU_GEMM; auto takes it when installed), C is cut into tiles:
// each of its sides of at least 2 min_block() into pieces of at least min_block() (at most 16).
// Where K is the longest side and C too small to cut (a weight gradient), K is cut instead, into
// chunks of at least min_block() whose products are added in a fixed order. The cuts depend on the
// shape and the machine alone, and each piece is one single-threaded oneDNN call, the pieces spread
// over the OpenMP team: so a result does not depend on the thread count, which [run] threads = 0
// adapts during a run. oneDNN's own threading split K at 8 and 16 threads for some shapes.
// OpenBLAS, the other choice, splits only M and N.
void gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
#ifdef LOOM_CPU_GEMM_ONEDNN
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  // Inside any parallel region, even one of a single thread, one whole call: a caller's team of
  // one thread and of two must get the same bits.
  const bool serial = M * N * K < kSerialWork || omp_get_level() > 0;
  int status;
  if (serial || std::max({M, N, K}) < 2 * min_block())
    status = sgemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else if (K > std::max(M, N) && block_count(M) * block_count(N) == 1)
    status = sgemm_chunks(std::min(block_count(K), 1 + kMaxScratch / (M * N)), ta, tb, M, N, K,
                          alpha, A, lda, B, ldb, beta, C, ldc);
  else
    status = sgemm_tiles(block_count(M), block_count(N), ta, tb, M, N, K, alpha, A, lda, B, ldb,
                         beta, C, ldc);
  check(status, M, N, K);
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
