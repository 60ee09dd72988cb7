// Prints the sgemm ceiling at 1 and 2 threads (the figure MFU and bench ratios divide by).
#include <cstdio>

#include "train/peak.hpp"

int main() {
  for (int t : {1, 2, 0}) {
    double g = loom::train::measure_sgemm_gflops(t, 1024, 5);
    std::printf("sgemm (1024 x max(threads, 2)) x 1024 x 1024, threads=%d: %.1f GFLOP/s\n", t, g);
  }
}
