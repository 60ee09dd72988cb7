// The sections the trainer owns, [run], [train], [stability], [faults] and [plan]: each key
// declared once, here (type, default, help), and read here into the typed settings the rest of the
// runtime uses, so a key is spelled in this file and nowhere else.
#pragma once

#include <cstdint>
#include <string>

#include "config/schema.hpp"
#include "config/section.hpp"
#include "train/schedule.hpp"

namespace loom::train {

struct RunSettings {
  std::string name, dir, device;
  int64_t device_memory;     // bytes; 0 = no cap
  std::string plan_cluster;  // "" = no prediction beside the measured figures
  uint64_t seed;
  int threads;  // 0 = all cores, adaptive on one rank per machine
  int64_t log_every;
  double peak_gflops;
  bool profile_layer, trace, tensorboard;
};
RunSettings read_run(const config::Section& run);

struct Settings {
  int64_t steps, exit_after, global_batch, micro_batch, accum, eval_every, eval_batches;
  int64_t sample_every, sample_tokens, sample_top_k, log_every;
  std::string sample_prompt;
  float beta1, beta2, eps, weight_decay, grad_clip;
  LrSchedule lr;
  uint64_t seed;
};
// accum is filled in by settle_layout (train/layout_rules.hpp), once the mesh is known.
// log_every and seed come from [run].
Settings read_settings(const config::Section& train, const RunSettings& run);

struct StabilitySettings {
  bool enabled, fail_on_nonfinite, skip_spikes;
  int64_t window, min_steps, check_every;
  double zscore;
};
StabilitySettings read_stability(const config::Section& stability);

struct Faults {
  int64_t inf_loss_step = 0, inf_loss_rank = 0, nan_grad_step = 0, bad_batch_step = 0,
          perturb_step = 0, perturb_rank = 0, ckpt_write_error_step = 0;
  std::string nan_grad_param;
  double slow_step =
      0;  // every step sleeps this fraction of its own time (a slower B for loom compare)
};
Faults read_faults(const config::Section& faults);

// [plan]: how the job runs where that is not Loom's choice to make, for `loom plan` and [run]
// plan_cluster. A run of another framework (Megatron-LM's unfused attention, its equal-block
// stages, its recompute policy) is planned from a config that states these facts.
struct PlanSettings {
  bool unfused_attention = false;    // attention = "unfused": the scores written out
  std::string stage_split = "cost";  // cost | blocks | count (plan/costing.hpp, Workload)
  std::string recompute;             // "" = [model] recompute; or a policy only the planner prices
};
PlanSettings read_plan(const config::Section& plan);

config::SectionSpec run_section();
config::SectionSpec train_section();
config::SectionSpec stability_section();
config::SectionSpec faults_section();
config::SectionSpec plan_section();

}  // namespace loom::train
