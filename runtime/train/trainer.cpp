#include "train/trainer.hpp"

#include "train/run.hpp"

namespace fs = std::filesystem;

namespace loom::train {

TrainSummary train(const JobSettings& job, const plugins::Selection& selection,
                   const dist::RankEnv& env, const fs::path& run_dir) {
  Run run(job, selection, env, run_dir);
  return run.train();
}

}  // namespace loom::train
