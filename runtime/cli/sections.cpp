#include "cli/sections.hpp"

#include "ckpt/checkpoint_settings.hpp"
#include "data/data_settings.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/plugin_settings.hpp"
#include "model/config.hpp"
#include "train/settings.hpp"

namespace loom::cli {

const std::vector<config::SectionSpec>& runtime_schema() {
  static const std::vector<config::SectionSpec> schema = [] {
    std::vector<config::SectionSpec> s = {train::run_section(), train::stability_section(),
                                          ckpt::checkpoint_section(), train::faults_section()};
    for (config::SectionSpec& m : model::model_sections()) s.push_back(std::move(m));
    for (config::SectionSpec (*section)() : {data::data_section, train::train_section,
                                             dist::parallel_section, plugins::plugins_section})
      s.push_back(section());
    return s;
  }();
  return schema;
}

}  // namespace loom::cli
