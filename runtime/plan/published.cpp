#include "plan/published.hpp"

#include <map>

#include "config/config.hpp"
#include "plan/from_config.hpp"

namespace loom::plan {

namespace {

// GPT as Megatron-LM trains it in the paper: vocabulary 51200, sequence 2048, learned positions,
// LayerNorm, GELU, biases, tied head, d_ff = 4h; mixed precision (fp16).
Workload megatron_gpt(int layers, int hidden, int heads, int64_t batch) {
  Workload w;
  model::Config& m = w.model;
  m.n_layer = layers, m.d_model = hidden, m.n_head = heads, m.n_kv_head = heads;
  m.d_ff = 4 * hidden, m.vocab_size = 51200, m.seq_len = 2048, m.max_positions = 2048;
  m.positions = "learned", m.norm = "layernorm", m.mlp = "gelu", m.bias = true, m.tied_embeddings = true;
  w.global_batch = batch;
  w.dtype = "fp16";
  w.grad_bytes = 2;  // Megatron all-reduces fp16 gradients
  return w;
}

// Llama 3 as the [model] presets describe it (model_presets.cpp, from Meta's model cards).
Workload llama3(const char* preset, int64_t batch) {
  config::Config cfg = config::Config::parse(std::string("[model]\npreset = \"") + preset + "\"\n[train]\nglobal_batch = " +
                                                 std::to_string(batch) + "\n[plugins]\nprecision = \"bf16\"\n",
                                             "<published>");
  cfg.validate_runtime();
  Workload w = workload_of(cfg);
  w.grad_bytes = 2;  // bf16 gradient reduction (Llama 3's FSDP, torchtitan's default)
  return w;
}

Layout layout(int gpus, int tp, int pp, int mb, int chunks, const char* recompute, int zero = 0) {
  Layout l;
  l.tp = tp, l.pp = pp, l.dp = gpus / (tp * pp), l.micro_batch = mb, l.recompute = recompute, l.zero = zero;
  l.schedule = chunks > 1 ? "interleaved" : "1f1b";
  l.chunks = chunks;
  return l;
}

std::vector<PublishedRun> build() {
  std::vector<PublishedRun> runs;
  // Narayanan et al. 2021, Table 1 (per-GPU TFLOP/s); tp, pp, micro-batch, global batch and the
  // interleaving as in Megatron-LM's examples/sc21/run_table_1.sh; full recompute throughout.
  const char* t1 = "Narayanan et al. 2021 (SC21), Table 1";
  struct Row {
    const char* name;
    int heads, hidden, layers, tp, pp, gpus, batch, mb, chunks;
    double tflops;
  };
  const Row rows[] = {
      {"GPT 1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, 1, 137},
      {"GPT 3.6B", 32, 3072, 30, 2, 1, 64, 512, 16, 1, 138},
      {"GPT 7.5B", 32, 4096, 36, 4, 1, 128, 512, 16, 1, 142},
      {"GPT 18.4B", 48, 6144, 40, 8, 1, 256, 1024, 8, 1, 135},
      {"GPT 39.1B", 64, 8192, 48, 8, 2, 512, 1536, 4, 1, 138},
      {"GPT 76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 2, 3, 140},
      {"GPT 145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 2, 2, 148},
      {"GPT 310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 1, 2, 155},
      {"GPT 529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 1, 3, 163},
      {"GPT 1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 1, 1, 163},
  };
  // Megatron-LM overlapped no tp collective then (its asynchronous tp all-reduce came later).
  for (const Row& r : rows)
    runs.push_back({r.name, t1, "a100-80g", megatron_gpt(r.layers, r.hidden, r.heads, r.batch),
                    layout(r.gpus, r.tp, r.pp, r.mb, r.chunks, "full"), "tflops", r.tflops, true,
                    "[plugins.tp]\noverlap = \"off\"\n"});
  // Llama 3 405B pre-training (Dubey et al. 2024, Table 4): 16K H100, tp 8, cp 1, pp 16, dp 128,
  // sequence 8192, 16M tokens per batch, 41% MFU on the 16K-GPU row. The paper runs a modified
  // interleaved schedule without giving v; v = 2 here is our assumption.
  runs.push_back({"Llama 3 405B, 16384 H100", "Dubey et al. 2024 (The Llama 3 Herd of Models), Table 4", "h100-sxm",
                  llama3("llama3-405b", 2048), layout(16384, 8, 16, 1, 2, "none"), "mfu", 0.41});
  // The 8K-GPU row of the same table: dp 64, the same 16M tokens, 43% MFU.
  runs.push_back({"Llama 3 405B, 8192 H100", "Dubey et al. 2024 (The Llama 3 Herd of Models), Table 4", "h100-sxm",
                  llama3("llama3-405b", 2048), layout(8192, 8, 16, 1, 2, "none"), "mfu", 0.43});
  // torchtitan's published Llama 3 8B on 8 H100: FSDP (ZeRO-3), bf16, local batch 1, sequence
  // 8192, selective activation checkpointing: 5762 tokens/s per GPU.
  runs.push_back({"Llama 3 8B, 8 H100, FSDP", "torchtitan docs/performance.md", "h100-sxm",
                  llama3("llama3-8b", 8), layout(8, 1, 1, 1, 1, "selective", 3), "tokens", 5762});
  return runs;
}

}  // namespace

const std::vector<PublishedRun>& published_runs() {
  static const std::vector<PublishedRun> runs = build();
  return runs;
}

// One registry scan per distinct set of options (the runs share two), not one per run.
PluginSources published_sources(const PublishedRun& run) {
  static std::map<std::string, PluginSources> by_options;
  auto it = by_options.find(run.plugin_options);
  if (it == by_options.end()) {
    const config::Config cfg = config::Config::parse("[plugins]\n" + run.plugin_options, "<published: " + run.name + ">");
    it = by_options.emplace(run.plugin_options, PluginSources(plugins::Registry::default_dirs(), &cfg)).first;
  }
  return it->second;  // a copy shares the scan and the cost cache
}

double megatron_flops(const model::Config& m, int64_t batch) {
  const double B = double(batch), s = double(m.seq_len), l = double(m.n_layer), h = double(m.d_model),
               V = double(m.vocab_size);
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

double predicted_metric(const PublishedRun& run, const Estimate& e) {
  const double seconds = e.step_ms / 1e3;
  if (run.metric == "tflops")
    return (run.megatron_flops ? megatron_flops(run.workload.model, run.workload.global_batch) : e.model_flops) /
           seconds / run.layout.world() / 1e12;
  if (run.metric == "mfu") return e.mfu;
  return e.tokens_per_s_per_device;
}

}  // namespace loom::plan
