// Saving and resuming the training state through the ckpt slot's writer (sync or async).
//   - Each rank writes the slices it owns: parameters and AdamW moments, dp rank 0 only, a
//     replicated tensor once (tp rank 0). No gather: the files are as sharded as the layout.
//   - A save goes to step-N.tmp/. After every rank's writer says its bytes are durable, each rank
//     leaves a small JSON note of its file, rank 0 merges them into manifest.json, renames the
//     directory to step-N/, points `latest` at it, and drops the oldest beyond keep_last.
//   - An async writer's save is committed at the next save or at the end, so training runs while
//     it writes; a write error surfaces at the next step's poll.
//   - Resume assembles every tensor globally from whatever layout wrote it and takes this rank's
//     slice, so a checkpoint loads into another layout.
#pragma once

#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint_settings.hpp"
#include "ckpt/format.hpp"
#include "distributed/comm.hpp"
#include "loader/registry.hpp"
#include "loader/selection.hpp"
#include "model/model.hpp"
#include "precision/precision.hpp"
#include "tensor/tensor.hpp"

namespace loom::ckpt {

// Where parameters and AdamW moments live when a ZeRO data plugin shards them: each rank then
// writes its own pieces (loom_shard_piece) and reads back only those.
struct ShardAccess {
  std::function<std::vector<loom_shard_piece>()> pieces;
  std::function<void()> loaded;  // after resume wrote into the pieces
};

// The data plugin's own state, saved per rank in every checkpoint.
struct PluginState {
  std::string plugin;                 // its name, recorded with the state
  std::function<std::string()> save;  // "" = nothing to save
  std::function<void(const std::string&)> load;
};

// What a checkpoint saves and resume restores, as the run holds it: the parameters, then either
// the flat AdamW moments (replicated state) or the data plugin's pieces (sharded); the data
// plugin's own state; the precision slot's state; and the count of applied updates. The one
// channel through which the checkpointer reaches the training state.
struct TrainingState {
  ParamStore* params = nullptr;
  Tensor* m = nullptr;  // AdamW moments over the flat buffers; unused when `shards` is set
  Tensor* v = nullptr;
  ShardAccess shards;  // set: the data plugin's pieces hold the values and moments
  PluginState plugin;  // empty: a data plugin without state of its own
  Precision* precision = nullptr;
  int64_t* applied = nullptr;
};

// How a run sets its checkpointer up.
struct CheckpointerSetup {
  CheckpointSettings settings;
  std::string precision;  // [plugins] precision, recorded in manifests
  model::Config model;    // this run's model, which a resumed checkpoint must hold
  const plugins::Selection* selection =
      nullptr;                    // the ckpt slot's writer and the plugins manifests record
  loom_options writer_options{};  // the writer's [plugins.<name>] table
  dist::CommWorld* world = nullptr;
  dist::MeshShape mesh;
  int rank = 0;
  std::filesystem::path run_dir;
  std::string config_text;       // the resolved config, saved in every manifest
  int64_t write_error_step = 0;  // [faults] ckpt_write_error_step
};

class Checkpointer {
 public:
  Checkpointer(CheckpointerSetup setup, TrainingState state);
  ~Checkpointer();
  // Loads [checkpoint] resume into the training state; returns the first step to run (1 when
  // not resuming).
  int64_t resume();
  // After step `step`'s update: saves when due (committing the previous async save first), and
  // otherwise asks the writer whether a background write failed. True when it saved this step.
  bool after_step(int64_t step, int64_t last_step);
  // Saves are on ([checkpoint] every > 0).
  bool enabled() const { return writer_ != nullptr; }
  // Commits what is still pending; called once training ends.
  void close();

 private:
  struct Pending {
    int64_t step = 0, applied = 0;
    File mine;                  // this rank's file, if it owns any slice
    std::future<uint32_t> crc;  // its checksum, computed while training goes on
    File precision;             // rank 0: precision.bin
    File state;                 // this rank's data-plugin state, if it has any
    std::string state_bytes;    // kept until the commit
    std::map<std::string, std::vector<int64_t>> shapes;
  };
  size_t owned_bytes() const;         // this rank's share of a checkpoint
  bool writes(const Param& q) const;  // this rank writes q (or its pieces)
  // The tensors of a checkpoint, read back into this rank's pieces or slices.
  void load_pieces(const std::filesystem::path& dir, const Manifest& man, const Reader& reader);
  void load_slices(const std::filesystem::path& dir, const Manifest& man, const Reader& reader);
  // This rank's parts of a save and where their bytes come from: its pieces, or its slices.
  using Copies = std::vector<std::pair<const float*, size_t>>;
  size_t stage_pieces(Pending& p, Copies& copies) const;
  size_t stage_slices(Pending& p, Copies& copies) const;
  void save(int64_t step);
  void write_files(Pending& p, const std::string& target, size_t total);
  void commit();
  void barrier();
  std::map<std::string, int64_t> layout() const;  // this run's mesh, as manifests record it
  void check(loom_status s, const loom_error& e, const std::string& what) const;

  std::filesystem::path root_;
  int64_t every_, keep_last_;
  bool verify_;
  std::string resume_, config_text_, precision_name_;
  dist::CommWorld* world_;
  dist::MeshShape mesh_;
  int rank_;
  int64_t write_error_step_;
  model::Config model_;  // this run's model, which a resumed checkpoint must hold
  TrainingState state_;
  std::vector<std::map<std::string, std::string>> plugins_;  // recorded in every manifest
  void check_same_model(const std::filesystem::path& dir, const Manifest& man) const;
  void load_plugin_state(const std::filesystem::path& dir, const Manifest& man,
                         const Reader& reader);
  void check_written(const std::filesystem::path& dir, const Manifest& m) const;
  void verify_written(const std::filesystem::path& dir, const File& f) const;
  void retire_old(const std::filesystem::path& final_dir);  // retention after a commit
  void check_writable() const;
  std::unique_ptr<plugins::Instance> writer_;
  const loom_ckpt_v2* table_ = nullptr;
  std::unique_ptr<Pending> pending_;
  std::vector<char> blob_;     // this rank's file, assembled here before the writer takes it
  std::future<void> cleanup_;  // checkpoints beyond keep_last, being deleted
  Reader reader_;              // the writer's read path, or the disk
};

}  // namespace loom::ckpt
