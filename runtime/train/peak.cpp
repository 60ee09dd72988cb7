#include "train/peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "ops/cpu/kernels.hpp"

namespace fs = std::filesystem;

namespace loom::train {

double measure_sgemm_gflops(int threads, int size, int repeats, bool bf16) {
  const int used = cpu::set_threads(threads);
  // One block of `size` rows per thread (at least two), so that a GEMM cut into blocks of rows
  // (ops/cpu/gemm_tiles.hpp) has one for each thread.
  const int64_t rows = int64_t{size} * std::clamp(used, 2, 16);
  std::vector<float> a(rows * size, 0.5f), b(int64_t{size} * size, 0.25f), c(rows * size, 0.f);
  std::vector<uint16_t> a16(bf16 ? a.size() : 0), b16(bf16 ? b.size() : 0);
  cpu::to_bf16(a16.data(), a.data(), static_cast<int64_t>(a16.size()));
  cpu::to_bf16(b16.data(), b.data(), static_cast<int64_t>(b16.size()));
  double best = 1e30;
  for (int r = 0; r < repeats + 1; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    if (bf16)
      cpu::gemm_typed(0, 0, rows, size, size, 1.f, a16.data(), LOOM_BF16, size, b16.data(),
                      LOOM_BF16, size, 0.f, c.data(), size);
    else
      cpu::gemm(0, 0, rows, size, size, 1.f, a.data(), size, b.data(), size, 0.f, c.data(), size);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);  // the first call warms caches and threads
  }
  return 2.0 * static_cast<double>(rows) * size * size / best / 1e9;
}

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown-cpu";
}

fs::path cache_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path base = xdg ? fs::path(xdg) : fs::path(home ? home : "/tmp") / ".cache";
  return base / "loom" / "cpu-peak.txt";
}

}  // namespace

Peak device_peak(const std::string& device, const std::string& dtype, bool bf16_gemms, int threads,
                 double configured_gflops) {
  if (configured_gflops > 0) return {configured_gflops, "configured ([run] peak_gflops)"};
  if (device == "cuda") {
    // Dense bf16 tensor-core peaks (vendor data sheets); fp32 paths are quoted against them too
    // so that MFU stays comparable across precisions. Without a device query we assume H100.
    return {989e3, "table: H100/H200 SXM dense bf16 989 TFLOP/s (" + dtype + ")"};
  }
  // The GEMM library, the operand dtype and the instructions are in the key: each has its own
  // ceiling.
  const char* isa = cpu::bf16_instructions();
  const std::string probe = std::string(bf16_gemms ? "bf16 GEMM" : "sgemm") + " probe (" +
                            cpu::gemm_library() + (bf16_gemms ? ", bf16 operands" : "") + "), ";
  const std::string key = cpu_model() + " | threads=" + std::to_string(threads) + " | " +
                          cpu::gemm_library() +
                          (bf16_gemms ? std::string(" | bf16 on ") + (isa ? isa : "none") : "");
  fs::path file = cache_file();
  {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      size_t bar = line.rfind(" = ");
      if (bar != std::string::npos && line.substr(0, bar) == key)
        return {std::stod(line.substr(bar + 3)), "measured " + probe + std::to_string(threads) +
                                                     " threads (cached in " + file.string() + ")"};
    }
  }
  double g = measure_sgemm_gflops(threads, 1024, 5, bf16_gemms);
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  std::ofstream(file, std::ios::app) << key << " = " << g << "\n";
  return {g, "measured " + probe + std::to_string(threads) + " threads (now cached in " +
                 file.string() + ")"};
}

}  // namespace loom::train
