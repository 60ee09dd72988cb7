#include "ops/ops.hpp"

#include "core/errors.hpp"
#include "ops/cpu/kernels.hpp"

namespace loom::ops {

const loom_ops* for_device(const std::string& device) {
  if (device == "cpu") return cpu();
  throw ConfigError("[run] device = \"" + device +
                    "\": this build has no kernels for it (built devices: cpu)");
}

int set_threads(const std::string& device, int threads) {
  return device == "cpu" ? cpu::set_threads(threads) : threads;
}

}  // namespace loom::ops
