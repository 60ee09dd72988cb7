// The pieces train() wires together, each checked or computed on its own: the [train] settings,
// the layout checks every rank would make, the run's tokenizer, and the context-parallel batch
// cut and metrics.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "dist/comm.hpp"
#include "dist/mesh.hpp"
#include "loader/selection.hpp"
#include "model/model.hpp"
#include "train/faults.hpp"
#include "train/pipeline.hpp"
#include "train/settings.hpp"
#include "train/stability.hpp"

namespace loom {
class ContextAttention;
}
namespace loom::tok {
class Tokenizer;
}

namespace loom::train {


// The [train] settings once the layout passed layout_problem (train/layout_rules.hpp), with
// micro_batch (0 = the whole per-rank batch) and accum filled in.
// check_layout (trainer.hpp) adds the pipeline plan; a Run plans it with its model.
Settings settle_layout(const config::Config& cfg, const plugins::Selection& selection, const model::Config& mc,
                       const dist::MeshShape& mesh);

// Tells plugins where they run (the loom.placement service), before any is created.
void publish_placement(const dist::RankEnv& env, const dist::MeshShape& mesh);
// What cannot exist with a ZeRO data plugin, refused before the first step rather than half-way.
// `check_every`: [stability]'s replica checks (0 = never).
void check_sharded(const Faults& faults, int stage, int64_t check_every);

// The run's tokenizer for text samples: [data] tokenizer, or tokenizer.json beside the shards;
// null for bytes or when the run takes no samples. Refuses samples of a non-byte vocabulary
// without one.
std::unique_ptr<tok::Tokenizer> run_tokenizer(const config::Config& cfg, const model::Config& mc, bool sampling);

// One job per run directory and per checkpoint directory: an exclusive flock on DIR/.lock, held
// until the process exits, with "pid host" in the file; a second job is refused naming the
// holder. A run that starts fresh (no [checkpoint] resume) is refused where an earlier run left
// its metrics.jsonl or checkpoints it would write over. Skipped when LOOM_RUN_DIR_LOCKED is set
// (a local launcher claimed the directories for the ranks it spawned).
void claim_run_dir(const std::filesystem::path& run_dir, const config::Config& cfg);

// RUN_DIR/plugins.json: for each slot, the plugin that filled it, its library path, version and
// the ABI it was built for, so a run says which of two same-named libraries it used.
void write_plugins_record(const std::filesystem::path& run_dir, const plugins::Selection& selection);

// This rank's sum of validation token losses over `batches` fixed windows of T local positions.
double validation_loss_sum(model::Model& model, const BatchFn& batch, int64_t batches, int64_t micro, int64_t T,
                           std::vector<int32_t>& tok, std::vector<int32_t>& tgt);
// Under cp, `read`'s whole sequences cut to this rank's positions; `read` itself otherwise.
BatchFn local_positions(const ContextAttention* cp, int64_t micro, BatchFn read);
// The context plugin's attention and exposed transfer time of the last step, and the spread of
// attention time over the cp group (its load balance).
void add_context_metrics(std::vector<std::pair<std::string, double>>& fields, const ContextAttention* cp,
                         dist::CommWorld* world);

}  // namespace loom::train
