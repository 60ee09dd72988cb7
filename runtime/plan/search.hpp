// The layout search of `loom plan`: every dp x tp x pp x cp x ep of the device count that the
// model allows, with each ZeRO stage, micro-batch, pipeline schedule and recompute policy, costed
// by estimate() and ranked: layouts that fit first, then by predicted step time.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "plan/estimate.hpp"

namespace loom::plan {

// Constraints from --fix ("tp=8", "zero=1", "recompute=full", "schedule=1f1b", "mb=1").
struct Fixed {
  std::map<std::string, std::string> values;
  bool allows(const Layout& l) const;
};
Fixed parse_fixed(const std::vector<std::string>& items);  // ConfigError for an unknown key

struct SearchResult {
  std::vector<Estimate> ranked;  // fitting first, then by step time
  long considered = 0;           // layouts costed
  std::vector<std::string> notes;
};

// Every layout of `devices` devices that the planner can cost and that `problems` says would run.
// max_tp: the largest tp tried (a node's devices).
std::vector<Layout> candidate_layouts(const Workload& w, int devices, int max_tp,
                                      const Fixed& fixed, const ProblemSource& problems);

SearchResult search(const Cluster& c, const Workload& w, int devices, const Fixed& fixed,
                    const CostSource& costs, const PipeSource& pipes,
                    const ProblemSource& problems);

// Why the best layout beats the next different kind of layout ("tp 8 keeps the tensor-parallel
// all-reduces on NVLink; pp 2 instead adds a 3.1% bubble"), for the ranked table.
std::string reason(const SearchResult& r);
// How `other` loses to `best`: "12.3% slower, mostly pipeline bubble (900 ms against 310 ms)".
std::string versus(const Estimate& best, const Estimate& other);

}  // namespace loom::plan
