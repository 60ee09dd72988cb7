// `loom bench comm`: collective bandwidth in nccl-tests' terms. For each size (doubling from
// min to max bytes): warm-up, timed iterations, the slowest rank's mean time, algbw = S / t and
// busbw = algbw x the op's factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all
// (n-1)/n; broadcast, sendrecv 1), and #wrong from a check of the result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "distributed/comm.hpp"

namespace loom::dist {

struct CommBenchOptions {
  std::string op = "all_reduce";
  int64_t min_bytes = 8, max_bytes = 256ll << 20;
  int warmup = 5, iters = 20;
  std::string dtype = "float";  // float | bfloat16
};

double busbw_factor(const std::string& op, int n);
// The NCCL_* environment variables this process sees, "A=1 B=2", or "none set (NCCL's defaults)".
std::string nccl_variables();
void check_op(const std::string& op);  // UsageError for an unknown op

// Runs on every rank of `world`; rank 0 prints the table. Returns the average busbw (GB/s).
double run_comm_bench(CommWorld& world, const CommBenchOptions& o);

// One data row of the table as printed (a launcher's "[rank 0] " prefix allowed): the size and
// the measured group (out-of-place or in-place, whichever the op has; the other says n/a).
struct CommBenchRow {
  double bytes = 0, time_us = 0, algbw = 0, busbw = 0, wrong = 0;
};
std::optional<CommBenchRow> parse_comm_bench_row(const std::string& line);

// "256M", "8", "1K" -> bytes.
int64_t parse_bytes(const std::string& s);

}  // namespace loom::dist
