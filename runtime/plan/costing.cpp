#include "plan/costing.hpp"

namespace loom::plan {

std::string Layout::data_plugin(const Workload& w) const {
  return w.data_plugin.empty() ? data_plugin() : w.data_plugin;
}

void model_state_bytes(double psi, int n, int stage, bool mixed, double out[3]) {
  // mixed: 2 (bf16 params) + 2 (bf16 grads) + 12 (fp32 master, m, v); fp32: 4 + 4 + 8.
  const double p = mixed ? 2 : 4, g = mixed ? 2 : 4, k = mixed ? 12 : 8;
  out[0] = stage >= 3 ? p * psi / n : p * psi;
  out[1] = stage >= 2 ? g * psi / n : g * psi;
  out[2] = stage >= 1 ? k * psi / n : k * psi;
}

}  // namespace loom::plan
