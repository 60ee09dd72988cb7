// The [stability] watch over a run, in the four layers `loom doctor` reports:
//   numeric       a non-finite loss or gradient, named by the first parameter (in backward order)
//                 where it appeared; the step is skipped (or the run fails)
//   data          loss and grad-norm spikes (z-score over a window), logged with the batch's
//                 global sample indices and token offsets and the per-layer gradient norms
//   communication every check_every steps the dp replicas' parameters are compared
//   hardware      and a collective with a known answer is re-run on every rank
// Everything it sees goes to <run dir>/events.jsonl (rank 0 writes it) as well as the console.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/comm.hpp"
#include "model/params.hpp"
#include "train/settings.hpp"

namespace loom::train {

class DataParallel;

// One line of events.jsonl: {"step": 12, "layer": "numeric", "event": "nonfinite", ...}.
struct Event {
  int64_t step;
  std::string layer, event;
  std::vector<std::pair<std::string, std::string>> fields;  // values already JSON-encoded
};

class Stability {
 public:
  // `append`: a resumed run adds to the events of the run it continues.
  Stability(const StabilitySettings& s, dist::CommWorld* world, DataParallel* dp, bool lead,
            const std::filesystem::path& run_dir, bool append);

  bool enabled() const { return enabled_; }
  // A non-finite loss or gradient at `step` (every rank calls this together): names where it
  // appeared first on any rank and returns true to skip the step, or throws when [stability]
  // nonfinite = "fail". `searchable`: the parameters' gradients are local (not ZeRO-sharded).
  bool on_nonfinite(int64_t step, double loss, double grad_norm, const ParamStore& params,
                    bool searchable = true);
  // Judges this step's loss and grad norm against the window. On a spike logs the batch (sample
  // indices and their token offsets, from `offsets`, in a blend's `sources`) and the per-layer
  // norms (`layer_norms`, called only then; a collective over tp, so every rank calls this);
  // returns true to skip.
  bool on_step(int64_t step, double loss, double grad_norm, const std::vector<int64_t>& offsets,
               const std::vector<std::string>& sources,
               const std::function<std::vector<std::pair<std::string, double>>()>& layer_norms);
  // Every check_every steps: replicas compared over dp, and a collective re-run over the world;
  // a diverging data plugin's replicas at each of its sync steps. A mismatch throws, naming the
  // ranks.
  void check(int64_t step, const ParamStore& params);
  // What the last check() ran, for the step's metrics (replica_check, collective_check), so
  // `loom doctor` can tell "no mismatch" from "not checked".
  void add_metrics(std::vector<std::pair<std::string, double>>& fields) const;
  // Any other event worth a line (an fp16 overflow skip, ...).
  void log(const Event& e);

 private:
  void check_collective(int64_t step);
  bool enabled_, fail_on_nonfinite_, skip_spikes_;
  bool checked_replicas_ = false, checked_collective_ = false;  // by the last check()
  int64_t window_, min_steps_, check_every_;
  double zscore_;
  dist::CommWorld* world_;
  DataParallel* dp_;
  bool lead_;
  std::filesystem::path events_path_;
  std::ofstream events_;
  std::deque<double> losses_, norms_;
  struct Recent {
    int64_t step;
    double loss_z;
    std::vector<int64_t> offsets;      // its batch
    std::vector<std::string> sources;  // a blend's source of each sample; empty for one directory
  };
  std::deque<Recent> recent_;  // the last three steps: a spike may come from the batch before it
  int consecutive_ = 0;        // spikes in a row
};

}  // namespace loom::train
