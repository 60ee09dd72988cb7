// A training run, assembled once and in one direction:
//   settings -> mesh and processes -> precision -> data -> tensor slots -> model (and its
//   pipeline stage) -> data slot -> optimizer -> faults -> checkpointer -> reporters
// (run_assembly.cpp). Each piece is built from the ones before it and never reconfigured by a
// later one. train() then runs steps (run_step.cpp): each step is a list of named parts. After
// each, the run reports (run_report.cpp): each slot adds its own fields to the metrics line.
#pragma once

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint_settings.hpp"
#include "ckpt/checkpointer.hpp"
#include "data/batches.hpp"
#include "data/data_settings.hpp"
#include "distributed/comm.hpp"
#include "distributed/comm_meter.hpp"
#include "distributed/launch.hpp"
#include "distributed/mesh.hpp"
#include "loader/selection.hpp"
#include "model/model.hpp"
#include "precision/precision.hpp"
#include "train/data_parallel.hpp"
#include "train/faults.hpp"
#include "train/hosts.hpp"
#include "train/job_settings.hpp"
#include "train/metrics.hpp"
#include "train/optimizer.hpp"
#include "train/peak.hpp"
#include "train/pipeline.hpp"
#include "train/settings.hpp"
#include "train/stability.hpp"
#include "train/summary.hpp"
#include "train/tensor_slots.hpp"
#include "train/thread_policy.hpp"
#include "train/trace.hpp"

namespace loom::tok {
class Tokenizer;
}

namespace loom::train {

// One step's metrics line: (name, value) in the order they are added.
using Fields = std::vector<std::pair<std::string, double>>;

class Run {
 public:
  Run(const JobSettings& job, const plugins::Selection& selection, const dist::RankEnv& env,
      const std::filesystem::path& run_dir);
  ~Run();
  TrainSummary train();

 private:
  using Clock = std::chrono::steady_clock;
  struct StepResult {
    double loss = 0, grad_norm = 0, lr = 0, comm_ms = 0, exposed_ms = 0;
    std::vector<dist::GroupTraffic> traffic;  // the comm meter's, over exactly the step's wall time
    bool skipped = false;
    int64_t host_waits = 0;       // times the host blocked on the device during the step
    int64_t host_read_bytes = 0;  // bytes host code copied out of device memory during it
  };

  // ---- assembly (run_assembly.cpp), in this order ----
  void check_and_settle();
  void start_devices();
  void start_precision();
  void open_data();
  void start_processes();
  void build_model();
  void start_data_slot();
  void start_optimizer_and_checkpoints();
  void start_reporters();
  void print_banner() const;
  std::string bf16_gemms_line() const;

  // ---- steps (run_step.cpp) ----
  StepResult step_once(int64_t step, PipeStepStats& pipe_stats);
  double forward_backward(int64_t step, float dloss, PipeStepStats& pipe_stats);
  BatchFn train_batches(int64_t step);
  void on_grads_final(const std::vector<Param*>& params);
  void reduce_gradients(StepResult& r);
  bool judge(int64_t step, StepResult& r, double carried_scale);
  void reduce_over_sharers(float* v, int64_t n);

  // ---- after each step and at the end (run_report.cpp) ----
  void report(int64_t step, const StepResult& r, double step_s, const PipeStepStats& pipe_stats,
              TrainSummary& sum);
  Fields common_fields(int64_t step, const StepResult& r, double step_s,
                       const PipeStepStats& pipe_stats);
  void evaluate_and_sample(int64_t step, Fields& fields, std::string& val_text, TrainSummary& sum);
  double validation_loss();
  void evaluating(bool on);
  void finish_run(TrainSummary& sum, double total_time);

  const JobSettings job_;
  const plugins::Selection& sel_;
  const dist::RankEnv env_;
  const std::filesystem::path run_dir_;
  const bool lead_;

  Settings s_;  // job_.train with the layout's accum (settle_layout)
  dist::MeshShape mesh_;
  int64_t local_batch_ = 0, first_sample_ = 0;
  int64_t T_ = 0, T_local_ = 0, max_rows_ = 0;
  std::unique_ptr<tok::Tokenizer> tokenizer_;

  std::string device_;
  const loom_ops_v2* ops_ = nullptr;
  int threads_ = 1;
  std::string threads_from_;  // what set the count under [run] threads = 0, for the banner
  std::unique_ptr<ThreadPolicy> thread_policy_;
  std::unique_ptr<Precision> precision_;
  std::unique_ptr<data::Batches> data_;
  // LOOM_DATA_TRACE=DIR: each rank writes DIR/rank<N>.tsv, a line per sample it reads (step,
  // global sample, source, offset), so tests can see every layout read the same windows.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> data_trace_{nullptr, &std::fclose};

  std::unique_ptr<dist::CommWorld> world_;
  Hosts hosts_;
  std::vector<Link> links_;  // rank 0's only

  std::unique_ptr<TensorSlots> slots_;
  ParamStore params_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<Pipeline> pipe_;  // pp > 1: this rank's stage
  std::unique_ptr<DataParallel> dp_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<FaultInjector> faults_;
  std::unique_ptr<ckpt::Checkpointer> checkpoints_;
  int64_t first_step_ = 1, last_step_ = 0;
  int64_t superseded_rows_ = 0;  // metrics.jsonl rows of the stopped run this one resumed, dropped

  std::unique_ptr<MetricsLog> log_;
  std::unique_ptr<Trace> trace_;
  std::unique_ptr<Stability> stability_;
  // [stability] compares dp replicas (enabled, check_every > 0): at the start, every
  // check_every steps and at the end; off, none of them runs.
  bool replica_checks() const { return job_.stability.enabled && job_.stability.check_every > 0; }
  Peak peak_;
  double flops_per_token_ = 0;
  int64_t activation_bytes_ = 0;
  bool peak_marked_ = false;  // the device's peak is marked before the first forward
  // Each slot's own metrics, added to every step's line after the common ones.
  std::vector<std::function<void(Fields&)>> reporters_;

  int64_t current_step_ = 0;  // for the named fault points reached from inside backward
  int64_t skipped_steps_ = 0;
  std::chrono::steady_clock::time_point
      first_report_;  // when this run's first step reported (for the ETA)
  std::string eta_text(int64_t step);
  std::vector<int32_t> tok_, tgt_;
  std::vector<int64_t> offsets_;
};

}  // namespace loom::train
