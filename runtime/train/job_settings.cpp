#include "train/job_settings.hpp"

namespace loom::train {

JobSettings read_job(const config::Config& cfg) {
  JobSettings j;
  j.run = read_run(cfg.section("run"));
  j.train = read_settings(cfg.section("train"), j.run);
  j.stability = read_stability(cfg.section("stability"));
  j.faults = read_faults(cfg.section("faults"));
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
