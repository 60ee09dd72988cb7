#include "train/trainer.hpp"

#include "train/run.hpp"

namespace fs = std::filesystem;

namespace loom::train {

TrainSummary train(config::Config& cfg, const plugins::Selection& selection,
                   const dist::RankEnv& env, const fs::path& run_dir) {
  Run run(cfg, selection, env, run_dir);
  return run.train();
}

}  // namespace loom::train
