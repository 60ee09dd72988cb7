// The pipeline slot as the trainer sees it: which layers this rank builds, and a step's schedule
// run over the pp group. Activations go forward and their gradients backward by sends (not
// waited for until the step's end) and receives issued in paired groups, the plan's exchanges,
// in the order the plugin gave and the plan checked (parallel/pipeline_plan.hpp). Each micro-batch
// in flight through a chunk keeps its activations in its own slot of that chunk's layers.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/comm.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/selection.hpp"
#include "model/model.hpp"
#include "parallel/layer_api.hpp"
#include "parallel/pipeline_plan.hpp"
#include "train/data_parallel.hpp"
#include "train/trace.hpp"

namespace loom::train {

// Fills micro-batch `mb`'s tokens and targets (B x T each).
using BatchFn = std::function<void(int mb, int32_t* tokens, int32_t* targets)>;

struct PipeStepStats {
  double schedule_ms = 0;             // from the first action to the last send's completion
  double busy_ms = 0;                 // in forward and backward compute
  int peak_in_flight = 0;             // micro-batch chunks holding activations at once, as run
  int64_t peak_activation_bytes = 0;  // what those chunks kept for backward (and split backwards
                                      // for their weight halves), at the peak
  std::vector<double> stage_busy_ms;  // busy_ms of every pp stage, in stage order
  double bubble() const { return schedule_ms > 0 ? 1 - busy_ms / schedule_ms : 0; }
};

// The schedule for `stages` pp ranks and its split of the model's layers into virtual stages:
// what every rank of the job computes alike.
struct PipelineLayout {
  std::unique_ptr<PipelinePlan> plan;
  std::string kinds;              // "E" + n_layer x "t" + "L"
  std::vector<int32_t> stage_of;  // virtual stage of every layer
  // The schedule plugin's scatter_gather option (false when it has none): with tp > 1 and the
  // activations whole on every tp rank, each sends 1/tp of them and the receiver all-gathers.
  bool scatter_gather = false;
  // Model-wide numbers of the layers pp rank `rank` builds (Gpt's `only`).
  std::vector<int> layers_of(int rank, int stages) const;
};
// The schedule's layer split over `stages` ([parallel] pp_chunks and pp_layout from `par`).
PipelineLayout plan_pipeline(const dist::ParallelSettings& par, const plugins::Selection& sel,
                             const model::Config& mc, int stages, int microbatches);

// The layer kinds a schedule splits: "E", a "t" per block, "L".
inline std::string layer_kinds(int64_t blocks) {
  return "E" + std::string(size_t(blocks), 't') + "L";
}

// Forward FLOPs per token of each layer (E, the blocks, L), as the default split balances them:
// the embedding is a lookup, a block its four projections, MLP and causal attention, the head
// its vocabulary GEMM. The planner splits with the same figures.
std::vector<double> layer_costs(const model::Config& c);

class Pipeline {
 public:
  // Runs `layout` on this rank's part of `model`, built from layout.layers_of(this pp rank).
  Pipeline(PipelineLayout layout, dist::CommWorld& world, model::Model& model, int64_t max_rows);
  ~Pipeline();

  // "1f1b, 4 stages x 1 chunk: E t | t t | t t | t L"
  std::string describe() const;

  // One training step: every micro-batch forward and backward through this rank's chunks.
  // `after_layer(i)` runs during the last backward through model.layers()[i] (the data slot's
  // grad-ready hook). Returns the step's loss sum, on every pp rank.
  double train_step(const BatchFn& batch, int64_t B, int64_t T, float dloss,
                    const std::function<void(size_t)>& after_layer, Trace* trace,
                    PipeStepStats& stats);
  // Forward only over `n` micro-batches (evaluation); the loss sum on every pp rank.
  double evaluate(const BatchFn& batch, int n, int64_t B, int64_t T);
  // Text samples: the logits over the vocabulary of the last of `ctx`'s positions (one sequence,
  // at most seq_len tokens), computed through every stage and returned on every pp rank.
  std::vector<float> next_logits(const std::vector<int32_t>& ctx);
  // Sums the tied embedding's gradient between the first stage (its owner) and the last (the
  // head's mirror of it), so both apply the same update. Under ZeRO the embedding is a sharding
  // unit of its own on both stages, so each dp rank sums its piece with the same piece.
  void sync_tied(ParamStore& params, DataParallel* dp);

 private:
  // After the schedule: the step's stats, and the loss and each stage's busy time summed over pp.
  double step_totals(std::chrono::steady_clock::time_point start, PipeStepStats& stats);
  // For each chunk, the index of the last action that adds weight gradients.
  std::vector<size_t> last_gradient_actions() const;
  struct Chunk {
    size_t first = 0, last = 0;   // model.layers()[first, last)
    int stage = 0;                // virtual stage
    std::vector<int> free_slots;  // activation slots of this chunk's layers not in use
    int slots = 0;
    int64_t bytes = 0;  // activations one micro-batch keeps here
  };
  // `incoming`: the pre-posted receive of this action's input (null: receive it now).
  void run_forward(const model::Microbatch& mb, int index, int chunk, loom_work* incoming,
                   Tensor* inbox, Trace* trace, const std::string& name);
  void run_backward(const model::Microbatch& mb, int index, int chunk, loom_work* incoming,
                    Tensor* inbox, Trace* trace, const std::string& name,
                    const std::function<void(size_t)>& after_layer);
  // The weight half of a split backward: the GEMMs its input half set aside.
  void run_weight(int index, int chunk, Trace* trace, const std::string& name,
                  const std::function<void(size_t)>& after_layer);
  void start_step(int64_t B, int64_t T, int64_t rows);
  void post_receive(size_t action, int64_t rows);
  // Sends t's rows to `peer`; within a step, in the exchange that pairs it (exchange()).
  void post(const Tensor& t, int peer, int tag);
  void exchange(const PipeExchange& x, int64_t rows);
  // Waits for the pre-posted receive of `into`'s rows (or receives them now) and, under
  // scatter/gather, all-gathers them over tp.
  void take(Tensor& into, loom_work* incoming, const Tensor* inbox, int peer, int tag);
  // Whether an n-row activation crosses as tp slices: scatter/gather is on and tp divides n (a
  // text sample's prompt may not be); then n / tp rows cross, otherwise n.
  bool sliced(int64_t n) const { return tp_ && n % tp_->size() == 0; }
  int64_t wire_rows(int64_t n) const { return sliced(n) ? n / tp_->size() : n; }
  void finish_sends();
  int tag(bool backward, int sender_stage, int mb) const;

  dist::Communicator& pp_;
  dist::Communicator* tp_ = nullptr;  // set when scatter/gather is on
  int rank_, stages_;
  std::unique_ptr<PipelinePlan> plan_;
  std::vector<int32_t> stage_of_;  // virtual stage of every model layer
  std::string kinds_;
  model::Model* model_ = nullptr;
  std::vector<Chunk> chunks_;
  Tensor x_, dx_;
  double loss_ = 0, busy_ms_ = 0;
  // Outgoing activations: a buffer per send until the step's end, reused across steps.
  std::vector<Tensor> send_bufs_;
  std::vector<loom_work*> pending_;  // by send buffer; null until a deferred send goes out
  // A step's sends wait for their exchange: each action's output, staged in its send buffer.
  struct Outgoing {
    size_t buffer = 0;
    int64_t numel = 0;
    int peer = 0, tag = 0;
  };
  std::vector<Outgoing> outgoing_;       // by action
  std::vector<PipeExchange> exchanges_;  // this rank's, in issue order
  bool deferring_ = false;
  // Host memory (the CPU): every receive is posted when the step starts, so the sender's data
  // finds it waiting (gloo's bound pairs otherwise hold it until it is posted: a pp2 step of
  // configs/pipeline.toml took 10-15% longer). On a device, where NCCL's unmatched receive would
  // hold up its stream, each goes in its exchange.
  bool eager_receives_ = false;
  size_t current_action_ = 0;
  // Incoming ones: each receive of a step is posted into its own buffer, at the step's start or
  // in its exchange (eager_receives_), ahead of the action that reads it. Indexed by action.
  std::vector<Tensor> recv_bufs_;
  std::vector<loom_work*> receives_;
  // Activation slots: which one each (micro-batch, chunk) in flight holds.
  std::vector<int> slot_of_;
  // Split backwards: the weight-gradient GEMMs a (micro-batch, chunk) set aside, per layer, until
  // its weight action. Sets are reused like activation slots: as many as were ever live at once.
  std::vector<std::vector<DeferredWeightGrads>> deferred_;
  std::vector<int> free_deferred_;
  std::vector<int> deferred_of_;  // the set each (chunk * m + micro-batch) holds, or -1
  int live_ = 0, peak_live_ = 0;
  int64_t live_bytes_ = 0, peak_live_bytes_ = 0;
  std::vector<std::vector<int32_t>> tokens_, targets_;
};

}  // namespace loom::train
