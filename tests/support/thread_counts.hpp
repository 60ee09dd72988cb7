// A CPU kernel's results at 1, 2, 8 and 16 kernel threads, to be compared bit for bit: a result
// must not depend on the thread count, which [run] threads = 0 changes during a run.
#pragma once

#include <doctest/doctest.h>
#include <omp.h>

#include <cstdint>
#include <vector>

#include "ops/cpu/kernels.hpp"

namespace loom::test {

// run(out) writes into `out` (n floats, each `init` before the call) once per count; the
// default thread count is restored after. A count OpenMP did not take would make the comparison
// vacuous, so each is checked.
template <class Run>
std::vector<std::vector<float>> at_thread_counts(int64_t n, float init, Run run) {
  std::vector<std::vector<float>> out;
  for (int threads : {1, 2, 8, 16}) {
    cpu::set_threads(threads);
    REQUIRE(omp_get_max_threads() == threads);  // OMP_THREAD_LIMIT could cap it
    out.emplace_back(static_cast<size_t>(n), init);
    run(out.back().data());
  }
  cpu::set_threads(0);
  return out;
}

}  // namespace loom::test
