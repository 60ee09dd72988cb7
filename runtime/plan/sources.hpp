// The planner's two callbacks bound to real plugins: each strategy's cost entry
// and the pipeline schedules' own action orders, simulated as
// `loom schedule` draws them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loader/registry.hpp"
#include "plan/estimate.hpp"

namespace loom::plan {

class PluginSources {
 public:
  // `plugin_tables`: [plugins] with the [plugins.<name>] options the cost entries see, as TOML
  // (PluginSettings::tables); "" = every plugin's defaults.
  explicit PluginSources(std::vector<plugins::SearchDir> dirs,
                         const std::string& plugin_tables = "");
  ~PluginSources();
  CostSource costs();
  PipeSource pipes();
  // Why a run of the layout would be refused (train's check, the schedule plugin's plan).
  ProblemSource problems();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace loom::plan
