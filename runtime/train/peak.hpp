// The peak FLOP/s that MFU divides by. GPUs: a table of vendor dense figures by device and
// dtype. CPUs: measured with a short sgemm probe (cached per CPU model and thread count), since
// no vendor figure describes a shared VM. Either can be overridden by [run] peak_gflops.
#pragma once

#include <string>

namespace loom::train {

struct Peak {
  double gflops = 0;
  std::string source;  // said in the log: "measured sgemm probe (oneDNN 2.6.3), 2 threads ..."
};

// Best of a few sgemm calls on `threads` threads, (size x threads) x size x size, in GFLOP/s.
// Not cached.
double measure_sgemm_gflops(int threads, int size = 1024, int repeats = 5);

Peak device_peak(const std::string& device, const std::string& dtype, int threads,
                 double configured_gflops);

}  // namespace loom::train
