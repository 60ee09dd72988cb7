#include "train/job_settings.hpp"

namespace loom::train {

const std::vector<config::SectionSpec>& job_sections() {
  static const std::vector<config::SectionSpec> schema = [] {
    std::vector<config::SectionSpec> s = {run_section(), stability_section(),
                                          ckpt::checkpoint_section(), faults_section(),
                                          plan_section()};
    for (config::SectionSpec& m : model::model_sections()) s.push_back(std::move(m));
    for (config::SectionSpec (*section)() :
         {data::data_section, train_section, dist::parallel_section, plugins::plugins_section})
      s.push_back(section());
    return s;
  }();
  return schema;
}

JobSettings read_job(const config::Config& cfg) {
  JobSettings j;
  j.run = read_run(cfg.section("run"));
  j.train = read_settings(cfg.section("train"), j.run);
  j.stability = read_stability(cfg.section("stability"));
  j.faults = read_faults(cfg.section("faults"));
  j.plan = read_plan(cfg.section("plan"));
  j.model = model::read_model(cfg.section("model"));
  j.init_from = model::init_from(cfg.section("model"));
  j.parallel = dist::read_parallel(cfg.section("parallel"));
  j.groups = dist::read_groups(cfg.section("parallel"));
  j.data = data::read_data(cfg.section("data"));
  j.checkpoint = ckpt::read_checkpoint(cfg.section("checkpoint"));
  j.plugins = plugins::read_plugins(cfg.section("plugins"));
  j.name = cfg.stem();
  return j;
}

JobSettings read_job(const config::Config& cfg, const plugins::Selection& selection) {
  JobSettings j = read_job(cfg);
  j.text = cfg.render(selection.schemas);
  return j;
}

}  // namespace loom::train
