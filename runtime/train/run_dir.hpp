// A run's directory: [run] dir or runs/<name>, claimed by one job at a time, and the record of
// which plugin libraries the run used.
#pragma once

#include <filesystem>

#include "ckpt/checkpoint_settings.hpp"
#include "loader/selection.hpp"
#include "train/job_settings.hpp"

namespace loom::train {

// [run] dir, else runs/<[run] name or the config's stem>.
std::filesystem::path default_run_dir(const JobSettings& job);

// One job per run directory and per checkpoint directory: an exclusive flock on DIR/.lock, held
// until the process exits, with "pid host" in the file; a second job is refused naming the
// holder. A run that starts fresh (no [checkpoint] resume) is refused where an earlier run left
// its metrics.jsonl or checkpoints it would write over. Skipped when LOOM_RUN_DIR_LOCKED is set
// (a local launcher claimed the directories for the ranks it spawned).
void claim_run_dir(const std::filesystem::path& run_dir, const ckpt::CheckpointSettings& c);

// RUN_DIR/plugins.json: for each slot, the plugin that filled it, its library path, version and
// the ABI it was built for, so a run says which of two same-named libraries it used.
void write_plugins_record(const std::filesystem::path& run_dir,
                          const plugins::Selection& selection);

}  // namespace loom::train
