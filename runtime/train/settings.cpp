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

RunSettings read_run(const config::Section& run) {
  RunSettings r;
  r.name = run.str("name");
  r.dir = run.str("dir");
  r.device = run.str("device");
  r.device_memory = static_cast<int64_t>(run.f64("device_memory_mib") * 1048576.0);
  r.seed = static_cast<uint64_t>(run.i64("seed"));
  r.threads = static_cast<int>(run.i64("threads"));
  r.log_every = run.i64("log_every");
  r.peak_gflops = run.f64("peak_gflops");
  r.profile_layer = run.boolean("profile_layer");
  r.tensorboard = run.boolean("tensorboard");
  r.trace = run.boolean("trace");
  r.plan_cluster = run.str("plan_cluster");
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

Settings read_settings(const config::Section& train, const RunSettings& run) {
  Settings s;
  s.steps = train.i64("steps");
  s.exit_after = train.i64("exit_after");
  s.global_batch = train.i64("global_batch");
  s.micro_batch = train.i64("micro_batch");  // 0: the whole per-rank batch at once
  s.accum = 0;
  s.eval_every = train.i64("eval_every");
  s.eval_batches = train.i64("eval_batches");
  s.sample_every = train.i64("sample_every");
  s.sample_tokens = train.i64("sample_tokens");
  s.sample_top_k = train.i64("sample_top_k");
  s.sample_prompt = train.str("sample_prompt");
  s.log_every = run.log_every;
  s.beta1 = static_cast<float>(train.f64("beta1"));
  s.beta2 = static_cast<float>(train.f64("beta2"));
  s.eps = static_cast<float>(train.f64("eps"));
  s.weight_decay = static_cast<float>(train.f64("weight_decay"));
  s.grad_clip = static_cast<float>(train.f64("grad_clip"));
  s.lr = {train.f64("lr"), train.f64("min_lr_ratio"), train.i64("warmup_steps"), s.steps};
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

StabilitySettings read_stability(const config::Section& stability) {
  StabilitySettings s;
  s.enabled = stability.boolean("enabled");
  s.fail_on_nonfinite = stability.str("nonfinite") == "fail";
  s.skip_spikes = stability.str("action") == "skip";
  s.window = stability.i64("window");
  s.min_steps = stability.i64("min_steps");
  s.check_every = stability.i64("check_every");
  s.zscore = stability.f64("zscore");
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

Faults read_faults(const config::Section& faults) {
  Faults f;
  f.inf_loss_step = faults.i64("inf_loss_step");
  f.inf_loss_rank = faults.i64("inf_loss_rank");
  f.nan_grad_step = faults.i64("nan_grad_step");
  f.nan_grad_param = faults.str("nan_grad_param");
  f.bad_batch_step = faults.i64("bad_batch_step");
  f.perturb_step = faults.i64("perturb_step");
  f.perturb_rank = faults.i64("perturb_rank");
  f.ckpt_write_error_step = faults.i64("ckpt_write_error_step");
  f.slow_step = faults.f64("slow_step");
  if (f.nan_grad_step > 0 && f.nan_grad_param.empty())
    throw ConfigError("[faults] nan_grad_step = " + std::to_string(f.nan_grad_step) +
                      " needs nan_grad_param");
  return f;
}

config::SectionSpec plan_section() {
  return {"plan",
          "how the job runs where Loom does not choose: facts `loom plan` prices (docs/plan.md)",
          {
              {"attention",
               ValueType::String,
               "\"fused\"",
               "fused (a flash kernel: Loom's, NeMo's) | unfused (the scores written out: "
               "Megatron-LM 2021-22)",
               -kInf,
               kInf,
               {"fused", "unfused"}},
              {"stage_split",
               ValueType::String,
               "\"cost\"",
               "how layers go to pipeline stages: cost (Loom: balanced by FLOPs) | blocks "
               "(Megatron-LM: equal blocks, the ends on top) | count (Megatron-DeepSpeed: equal "
               "layers, embedding and head among them)",
               -kInf,
               kInf,
               {"cost", "blocks", "count"}},
              {"recompute",
               ValueType::String,
               "\"\"",
               "the recompute policy planned, where [model] recompute cannot say it: "
               "selective-megatron (the attention core rerun) | selective-op (torchtitan: every "
               "other matmul rerun); \"\" = [model] recompute",
               -kInf,
               kInf,
               {"", "none", "selective", "full", "selective-megatron", "selective-op"}},
          }};
}

PlanSettings read_plan(const config::Section& plan) {
  PlanSettings p;
  p.unfused_attention = plan.str("attention") == "unfused";
  p.stage_split = plan.str("stage_split");
  p.recompute = plan.str("recompute");
  return p;
}

}  // namespace loom::train
