// The peak FLOP/s that MFU divides by. GPUs: a table of vendor dense figures by device and
// dtype. CPUs: measured with a short GEMM probe (cached per CPU model, thread count and operand
// dtype), since no vendor figure describes a shared VM: fp32, or bf16 when the run's GEMMs take
// bf16 operands on the CPU's bf16 instructions, so MFU is against the ceiling of the GEMMs the run
// actually makes. Either can be overridden by [run] peak_gflops.
#pragma once

#include <string>

namespace loom::train {

struct Peak {
  double gflops = 0;
  std::string source;  // said in the log: "measured sgemm probe (oneDNN 2.6.3), 2 threads ..."
};

// Best of a few GEMM calls on `threads` threads, (size x threads) x size x size, in GFLOP/s, on
// fp32 operands (or bf16 ones, through the op table's gemm_typed). Not cached.
double measure_sgemm_gflops(int threads, int size = 1024, int repeats = 5, bool bf16 = false);

// `bf16_gemms`: the run's GEMMs take bf16 operands natively (Precision::bf16_gemms).
Peak device_peak(const std::string& device, const std::string& dtype, bool bf16_gemms, int threads,
                 double configured_gflops);

}  // namespace loom::train
