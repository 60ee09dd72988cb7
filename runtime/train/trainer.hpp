// The training entry point: one rank's run, assembled (run_assembly.cpp), stepped (run_step.cpp)
// and reported (run_report.cpp) by train::Run. The loop per step: data -> micro-batches (gradient
// accumulation) -> global grad norm and clipping -> AdamW -> metrics, with validation and text
// samples along the way.
#pragma once

#include <filesystem>

#include "distributed/launch.hpp"
#include "loader/selection.hpp"
#include "train/job_settings.hpp"
#include "train/summary.hpp"

namespace loom::train {

// Trains as the job's settings say (read_job), as rank env.rank of env.world. Rank 0 prints and
// writes <run_dir>/metrics.jsonl and <run_dir>/config.toml.
TrainSummary train(const JobSettings& job, const plugins::Selection& selection,
                   const dist::RankEnv& env, const std::filesystem::path& run_dir);

}  // namespace loom::train
