// The precision slot as the runtime drives it. The plugin is the policy (which format and scale
// each GEMM operand gets, the loss scale, when to skip a step); the op table does the casts. A
// step ends with one handshake: the plugin's per-step stats are reduced across ranks, the
// overflow verdict (already global) is handed in, and the plugin answers skip or apply.
#pragma once

#include <loom/plugin.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loader/host.hpp"
#include "loader/registry.hpp"
#include "tensor/tensor.hpp"

namespace loom {

class Precision {
 public:
  Precision(const plugins::Found& found, const loom_options* options, const loom_ops* ops);
  ~Precision();
  Precision(const Precision&) = delete;
  Precision& operator=(const Precision&) = delete;

  const char* name() const;
  int32_t compute_dtype() const { return table_->compute_dtype; }
  // Operands pass through unchanged (fp32): no copies, no calls.
  bool exact() const { return table_->exact != 0; }

  // A copy of `t` as the GEMM operand `site` must see it (`t` itself when exact). Sites are named
  // "<param>" for a weight, "<param>.x" and "<param>.dy" for the activation and the gradient
  // that meet it; the first use of a name registers it.
  Tensor operand(const Tensor& t, const std::string& site, loom_operand_role role);

  // The factor the loss gradient carries this step (1 without loss scaling).
  double loss_scale() const;
  // Ends the step: `over_sharers` reduces (MAX, in place) across the ranks that hold the same
  // sites, the ranks of one pipeline stage; `over_world` across every rank, for the overflow
  // flag; `found_inf` says whether this rank saw non-finite gradients. True = skip it.
  using ReduceMax = std::function<void(float*, int64_t)>;
  bool end_step(bool found_inf, const ReduceMax& over_sharers, const ReduceMax& over_world);
  // The plugin's metrics for the step that just ended.
  std::vector<std::pair<std::string, double>> metrics() const;
  // The scaling state (empty for plugins without one), for checkpoints.
  std::string save_state() const;
  void load_state(const std::string& bytes);

 private:
  int32_t site_id(const std::string& site, loom_operand_role role);
  [[noreturn]] void fail(const std::string& what) const;
  std::unique_ptr<plugins::Instance> instance_;
  const loom_precision_v2* table_;
  const loom_ops* ops_;
  std::unordered_map<std::string, int32_t> sites_;
  mutable loom_error err_;
};

}  // namespace loom
