#include "train/settings.hpp"

#include "core/errors.hpp"

namespace loom::train {

using config::kInf;
using config::ValueType;

config::SectionSpec run_section() {
  return {"run",
          "what to run and where its outputs go",
          {
              {"name", ValueType::String, "\"\"", "run name; default: the config file's stem"},
              {"dir", ValueType::String, "\"\"", "run directory; default: runs/<name>"},
              {"seed", ValueType::Int, "1234", "seeds initialisation, data order and sampling", 0,
               kInf},
              {"device",
               ValueType::String,
               "\"cpu\"",
               "device the op table runs on (strict: the CPU emulating a discrete GPU)",
               -kInf,
               kInf,
               {"cpu", "strict", "cuda"}},
              {"device_memory_mib", ValueType::Float, "0",
               "cap on the device's tensor memory in MiB (strict, cuda), as a smaller GPU's; 0 = "
               "the device's own",
               0, kInf},
              {"threads", ValueType::Int, "0",
               "CPU threads for kernels; 0 = all cores, fewer while other processes keep some busy "
               "(one rank per machine)",
               0, 4096},
              {"log_every", ValueType::Int, "1", "print a step line every N steps", 1, kInf},
              {"peak_gflops", ValueType::Float, "0", "device peak for MFU; 0 = table or measured",
               0, kInf},
              {"tensorboard", ValueType::Bool, "false",
               "also write the metrics as TensorBoard events, in <run dir>/tensorboard"},
              {"profile_layer", ValueType::Bool, "false",
               "time block 0 segment by segment over the training steps (not evaluation or "
               "samples); table at the end"},
              {"trace", ValueType::Bool, "false",
               "write a Chrome trace-event JSON per rank (run dir/trace/rank<N>.json)"},
              {"plan_cluster", ValueType::String, "\"\"",
               "cluster file (clusters/*.toml): print loom plan's predicted step time, exposed "
               "communication and memory beside the measured ones"},
          }};
}

RunSettings read_run(const config::Config& cfg) {
  RunSettings r;
  r.name = cfg.str("run.name");
  r.dir = cfg.str("run.dir");
  r.device = cfg.str("run.device");
  r.device_memory = static_cast<int64_t>(cfg.f64("run.device_memory_mib") * 1048576.0);
  r.seed = static_cast<uint64_t>(cfg.i64("run.seed"));
  r.threads = static_cast<int>(cfg.i64("run.threads"));
  r.log_every = cfg.i64("run.log_every");
  r.peak_gflops = cfg.f64("run.peak_gflops");
  r.profile_layer = cfg.boolean("run.profile_layer");
  r.tensorboard = cfg.boolean("run.tensorboard");
  r.trace = cfg.boolean("run.trace");
  r.plan_cluster = cfg.str("run.plan_cluster");
  return r;
}

config::SectionSpec train_section() {
  return {
      "train",
      "optimisation",
      {
          {"steps", ValueType::Int, "100", "optimizer steps", 1, kInf},
          {"exit_after", ValueType::Int, "0",
           "stop after this step, as a preempted job would (the schedule still spans steps); 0 = "
           "run to the end",
           0, kInf},
          {"global_batch", ValueType::Int, "16", "sequences per step, across all ranks", 1, kInf},
          {"micro_batch", ValueType::Int, "0", "sequences per forward/backward; 0 = global_batch",
           0, kInf},
          {"lr", ValueType::Float, "6e-4", "peak learning rate", 0, 10},
          {"min_lr_ratio", ValueType::Float, "0.1", "cosine decays to lr * this", 0, 1},
          {"warmup_steps", ValueType::Int, "10", "linear warm-up steps", 0, kInf},
          {"weight_decay", ValueType::Float, "0.1", "AdamW decoupled decay (matrices only)", 0, 10},
          {"beta1", ValueType::Float, "0.9", "AdamW beta1", 0, 1, {}, true},
          {"beta2", ValueType::Float, "0.95", "AdamW beta2", 0, 1, {}, true},
          {"eps", ValueType::Float, "1e-8", "AdamW epsilon", 0, 1},
          {"grad_clip", ValueType::Float, "1.0", "clip the global grad norm to this; 0 = off", 0,
           kInf},
          {"eval_every", ValueType::Int, "50", "validation loss every N steps; 0 = never", 0, kInf},
          {"eval_batches", ValueType::Int, "8",
           "validation batches of global_batch windows per evaluation (the same windows under "
           "every layout)",
           1, kInf},
          {"sample_every", ValueType::Int, "0", "print a text sample every N steps; 0 = never", 0,
           kInf},
          {"sample_tokens", ValueType::Int, "96", "tokens per sample", 1, kInf},
          {"sample_top_k", ValueType::Int, "8", "sample from the k likeliest tokens; 1 = greedy", 1,
           kInf},
          {"sample_prompt", ValueType::String, "\"\"", "text the sample continues"},
      }};
}

Settings read_settings(const config::Config& cfg) {
  const RunSettings run = read_run(cfg);
  Settings s;
  s.steps = cfg.i64("train.steps");
  s.exit_after = cfg.i64("train.exit_after");
  s.global_batch = cfg.i64("train.global_batch");
  s.micro_batch = cfg.i64("train.micro_batch");  // 0: the whole per-rank batch at once
  s.accum = 0;
  s.eval_every = cfg.i64("train.eval_every");
  s.eval_batches = cfg.i64("train.eval_batches");
  s.sample_every = cfg.i64("train.sample_every");
  s.sample_tokens = cfg.i64("train.sample_tokens");
  s.sample_top_k = cfg.i64("train.sample_top_k");
  s.sample_prompt = cfg.str("train.sample_prompt");
  s.log_every = run.log_every;
  s.beta1 = static_cast<float>(cfg.f64("train.beta1"));
  s.beta2 = static_cast<float>(cfg.f64("train.beta2"));
  s.eps = static_cast<float>(cfg.f64("train.eps"));
  s.weight_decay = static_cast<float>(cfg.f64("train.weight_decay"));
  s.grad_clip = static_cast<float>(cfg.f64("train.grad_clip"));
  s.lr = {cfg.f64("train.lr"), cfg.f64("train.min_lr_ratio"), cfg.i64("train.warmup_steps"),
          s.steps};
  s.seed = run.seed;
  return s;
}

config::SectionSpec stability_section() {
  return {
      "stability",
      "catching what goes wrong in a run, layer by layer (docs/stability.md)",
      {
          {"enabled", ValueType::Bool, "true",
           "watch every step: non-finite values, spikes, replicas"},
          {"nonfinite",
           ValueType::String,
           "\"skip\"",
           "a non-finite loss or gradient: skip the step, or fail the run",
           -kInf,
           kInf,
           {"skip", "fail"}},
          {"window", ValueType::Int, "50", "steps of loss and grad-norm history for spike z-scores",
           2, kInf},
          {"min_steps", ValueType::Int, "10", "steps of history before spikes are judged", 2, kInf},
          {"zscore", ValueType::Float, "6.0",
           "a loss or grad norm this many deviations above the window's mean is a spike", 0, kInf},
          {"action",
           ValueType::String,
           "\"log\"",
           "on a spike: log it, or also skip the update",
           -kInf,
           kInf,
           {"log", "skip"}},
          {"check_every", ValueType::Int, "100",
           "compare dp replicas' parameters and re-check a collective every N steps; 0 = never", 0,
           kInf},
      }};
}

StabilitySettings read_stability(const config::Config& cfg) {
  StabilitySettings s;
  s.enabled = cfg.boolean("stability.enabled");
  s.fail_on_nonfinite = cfg.str("stability.nonfinite") == "fail";
  s.skip_spikes = cfg.str("stability.action") == "skip";
  s.window = cfg.i64("stability.window");
  s.min_steps = cfg.i64("stability.min_steps");
  s.check_every = cfg.i64("stability.check_every");
  s.zscore = cfg.f64("stability.zscore");
  if (s.min_steps > s.window)
    throw ConfigError("[stability] min_steps = " + std::to_string(s.min_steps) +
                      " exceeds window = " + std::to_string(s.window));
  return s;
}

config::SectionSpec faults_section() {
  return {
      "faults",
      "fault injection, for tests of the paths above (all off by default)",
      {
          {"inf_loss_step", ValueType::Int, "0", "at this step one rank's loss gradient is inf", 0,
           kInf},
          {"inf_loss_rank", ValueType::Int, "0", "the rank inf_loss_step poisons", 0, 65535},
          {"nan_grad_step", ValueType::Int, "0", "at this step one parameter's gradient gets a NaN",
           0, kInf},
          {"nan_grad_param", ValueType::String, "\"\"",
           "the parameter nan_grad_step poisons (every rank)"},
          {"bad_batch_step", ValueType::Int, "0",
           "at this step every sample's targets are scrambled (a loss spike)", 0, kInf},
          {"perturb_step", ValueType::Int, "0",
           "at this step one rank's parameters are nudged off its replicas", 0, kInf},
          {"perturb_rank", ValueType::Int, "0", "the rank perturb_step nudges", 0, 65535},
          {"ckpt_write_error_step", ValueType::Int, "0",
           "the checkpoint of this step fails to write (a full disk)", 0, kInf},
          {"slow_step", ValueType::Float, "0.0",
           "every step sleeps this fraction of its own time (0.15: 15% slower), for loom compare",
           0, 100},
      }};
}

Faults Faults::from(const config::Config& cfg) {
  Faults f;
  f.inf_loss_step = cfg.i64("faults.inf_loss_step");
  f.inf_loss_rank = cfg.i64("faults.inf_loss_rank");
  f.nan_grad_step = cfg.i64("faults.nan_grad_step");
  f.nan_grad_param = cfg.str("faults.nan_grad_param");
  f.bad_batch_step = cfg.i64("faults.bad_batch_step");
  f.perturb_step = cfg.i64("faults.perturb_step");
  f.perturb_rank = cfg.i64("faults.perturb_rank");
  f.ckpt_write_error_step = cfg.i64("faults.ckpt_write_error_step");
  f.slow_step = cfg.f64("faults.slow_step");
  if (f.nan_grad_step > 0 && f.nan_grad_param.empty())
    throw ConfigError("[faults] nan_grad_step = " + std::to_string(f.nan_grad_step) +
                      " needs nan_grad_param");
  return f;
}

}  // namespace loom::train
