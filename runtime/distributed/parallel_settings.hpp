// The [parallel] section: declared here and read here, into the degrees and options the mesh,
// the pipeline, the planner and the launchers use.
#pragma once

#include <cstdint>
#include <string>

#include "config/schema.hpp"
#include "config/section.hpp"

namespace loom::dist {

struct ParallelSettings {
  int nproc, dp;  // dp 0 = "auto": the world over the other degrees
  int tp, pp, ep, cp, pp_chunks;
  std::string pp_layout, interface;
  int64_t timeout_s;
};
ParallelSettings read_parallel(const config::Section& parallel);
config::SectionSpec parallel_section();

}  // namespace loom::dist
