#include "plan/published.hpp"

#include <map>

#include "config/config.hpp"
#include "config/section.hpp"
#include "loader/plugin_settings.hpp"
#include "model/config.hpp"
#include "plan/from_config.hpp"
#include "train/settings.hpp"

namespace loom::plan {

namespace {

// GPT as Megatron-LM trains it: vocabulary 51200, sequence 2048, learned positions, LayerNorm,
// GELU, biases, tied head, d_ff = 4h; mixed precision (fp16 or bf16: the same peak), 2-byte
// gradients on the wire, unfused attention (2021-22).
Workload megatron_gpt(int layers, int hidden, int heads, int64_t batch, int64_t vocab = 51200) {
  Workload w;
  model::Config& m = w.model;
  m.n_layer = layers, m.d_model = hidden, m.n_head = heads, m.n_kv_head = heads;
  m.d_ff = 4 * hidden, m.vocab_size = vocab, m.seq_len = 2048, m.max_positions = 2048;
  m.positions = "learned", m.norm = "layernorm", m.mlp = "gelu", m.bias = true,
  m.tied_embeddings = true;
  w.global_batch = batch;
  w.dtype = "fp16";
  w.grad_bytes = 2;
  w.unfused_attention = true;  // its softmax and dropout over explicit scores
  w.stage_split = "blocks";    // equal blocks per stage, the embedding and head on the ends
  return w;
}

// Llama 3 as the [model] presets describe it (model_presets.cpp, from Meta's model cards).
Workload llama3(const char* preset, int64_t batch, int64_t seq_len = 8192) {
  config::Config cfg = config::Config::parse(
      std::string("[model]\npreset = \"") + preset + "\"\nseq_len = " + std::to_string(seq_len) +
          "\n[train]\nglobal_batch = " + std::to_string(batch) +
          "\n[plugins]\nprecision = \"bf16\"\n",
      "<published>");
  std::vector<config::SectionSpec> read =
      model::model_sections();  // the sections workload_of reads
  for (auto section : {train::run_section, train::train_section, plugins::plugins_section})
    read.push_back(section());
  cfg.check_sections(read);
  train::JobSettings job;  // the sections workload_of reads
  job.model = model::read_model(cfg.section("model"));
  job.run = train::read_run(cfg.section("run"));
  job.train = train::read_settings(cfg.section("train"), job.run);
  job.plugins = plugins::read_plugins(cfg.section("plugins"));
  Workload w = workload_of(job);
  w.grad_bytes = 2;  // bf16 gradient reduction (Llama 3's FSDP, NeMo's distributed optimizer)
  return w;
}

// "tp8 pp16 cp16 ..." as Layout: tp, pp, cp, micro-batch, interleave depth, recompute, ZeRO, sp.
Layout layout(int gpus, int tp, int pp, int mb, int chunks, const char* recompute, int zero = 0,
              int cp = 1, bool sp = false) {
  Layout l;
  l.tp = tp, l.pp = pp, l.cp = cp, l.dp = gpus / (tp * pp * cp), l.micro_batch = mb,
  l.recompute = recompute, l.zero = zero;
  l.sp = sp;
  l.schedule = chunks > 1 ? "interleaved" : "1f1b";
  l.chunks = chunks;
  return l;
}

// Megatron-LM overlapped no tp collective in 2021-22 (its asynchronous tp all-reduce came later).
const char* kMegatronTp = "[plugins.tp]\noverlap = \"off\"\n";

// Narayanan et al. 2021, Table 1 (per-GPU TFLOP/s by its eq. 3); tp, pp, micro-batch, global
// batch and the interleaving as in Megatron-LM's examples/sc21/run_table_1.sh; full recompute.
void narayanan_2021(std::vector<PublishedRun>& runs) {
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
  for (const Row& r : rows)
    runs.push_back({r.name, t1, "a100-80g", megatron_gpt(r.layers, r.hidden, r.heads, r.batch),
                    layout(r.gpus, r.tp, r.pp, r.mb, r.chunks, "full"), "tflops", r.tflops,
                    "megatron2021", kMegatronTp});
}

// Korthikanti et al. 2022 (Reducing Activation Recomputation), Tables 3 and 5: sequence
// parallelism with selective recompute (theirs: the attention core rerun) on Selene's A100s, MFU
// by 72 B L s h^2 (1 + s/6h + v/12hL), the tied head included.
void korthikanti_2022(std::vector<PublishedRun>& runs) {
  const char* src = "Korthikanti et al. 2022 (MLSys 2023), Tables 3 and 5";
  struct Row {
    const char* name;
    int heads, hidden, layers, tp, pp, gpus, batch, chunks;
    double mfu;
  };
  const Row rows[] = {
      {"GPT 22B, sp + selective", 64, 6144, 48, 8, 1, 8, 4, 1, 0.415},
      {"GPT 175B, sp + selective", 96, 12288, 96, 8, 8, 64, 64, 3, 0.514},
      {"GPT 530B, sp + selective", 128, 20480, 105, 8, 35, 280, 280, 3, 0.560},
      {"GPT 1T, sp + selective", 160, 25600, 128, 8, 64, 512, 512, 1, 0.563},
      {"GPT 530B, sp + selective, dp 8", 128, 20480, 105, 8, 35, 2240, 2240, 3, 0.542},
  };
  for (const Row& r : rows) {
    const int mb = r.gpus == 8 ? 4 : 1;  // the 22B row runs its 4 sequences as one micro-batch
    runs.push_back({r.name, src, "a100-80g", megatron_gpt(r.layers, r.hidden, r.heads, r.batch),
                    layout(r.gpus, r.tp, r.pp, mb, r.chunks, "selective-megatron", 0, 1, true),
                    "mfu", r.mfu, "executed", kMegatronTp});
  }
}

// Llama 3 405B pre-training (Dubey et al. 2024, Table 4): tp 8, pp 16, 16M tokens per batch; the
// paper runs a modified interleaved schedule without giving v (v = 2 here is our assumption), and
// its tensor parallelism cites Korthikanti et al., whose sequence parallelism we assume with it.
void llama3_table4(std::vector<PublishedRun>& runs) {
  const char* src = "Dubey et al. 2024 (The Llama 3 Herd of Models), Table 4";
  runs.push_back({"Llama 3 405B, 16384 H100", src, "h100-sxm", llama3("llama3-405b", 2048),
                  layout(16384, 8, 16, 1, 2, "none", 1, 1, true), "mfu", 0.41});
  runs.push_back({"Llama 3 405B, 8192 H100", src, "h100-sxm", llama3("llama3-405b", 2048),
                  layout(8192, 8, 16, 1, 2, "none", 1, 1, true), "mfu", 0.43});
  // Its cp all-gathers k and v, exposed (section 3.3.2: "the exposed all-gather latency is small").
  runs.push_back({"Llama 3 405B, 131K, cp 16", src, "h100-sxm", llama3("llama3-405b", 128, 131072),
                  layout(16384, 8, 16, 1, 2, "none", 1, 16, true), "mfu", 0.38, "model",
                  "[plugins.cp]\nalgorithm = \"allgather\"\n"});
}

// NVIDIA's DGX Cloud benchmarking recipes (NVIDIA/dgxc-benchmarking, NeMo 24.09, BF16), on DGX
// H100: MFU by their count (full attention, no recompute, the head but not the input embedding:
// Loom's). NeMo runs sp with tp, the distributed optimizer (ZeRO-1), flash attention and tp
// overlap.
void nemo_h100(std::vector<PublishedRun>& runs) {
  const char* src = "NVIDIA dgxc-benchmarking (NeMo 24.09 BF16 recipes)";
  runs.push_back({"Llama 3.1 8B, 8 H100, NeMo", src, "h100-sxm", llama3("llama3-8b", 128),
                  layout(8, 1, 1, 1, 1, "none", 1, 2), "mfu", 0.5937});
  runs.push_back({"Llama 3.1 70B, 64 H100, NeMo", src, "h100-sxm", llama3("llama3-70b", 128),
                  layout(64, 4, 4, 1, 5, "none", 1, 2, true), "mfu", 0.5410});
  runs.push_back({"Llama 3.1 405B, 576 H100, NeMo", src, "h100-sxm", llama3("llama3-405b", 252),
                  layout(576, 8, 9, 1, 7, "none", 1, 2, true), "mfu", 0.5578});
  Workload gpt3 = megatron_gpt(96, 12288, 96, 256);
  gpt3.dtype = "bf16", gpt3.unfused_attention = false;
  runs.push_back({"GPT-3 175B, 128 H100, NeMo", src, "h100-sxm", gpt3,
                  layout(128, 4, 8, 1, 12, "none", 1, 1, true), "mfu", 0.5354});
}

// torchtitan (docs/performance.md): FSDP (ZeRO-3) in eager PyTorch, its per-op selective
// checkpointing (every other matmul rerun) or full. On A100 80GB, local batch 1; on Grand Teton's
// H100 (96 GB HBM2e, 2.4 TB/s, 500 W), local batch 2 over 8 GPUs.
void torchtitan(std::vector<PublishedRun>& runs) {
  const char* src = "torchtitan docs/performance.md";
  auto fsdp = [](Workload w) {
    w.grad_bytes = 4;  // its default mixed_precision_reduce = "float32"
    return w;
  };
  runs.push_back({"Llama 3 8B, 64 A100, FSDP", src, "a100-80g", fsdp(llama3("llama3-8b", 64)),
                  layout(64, 1, 1, 1, 1, "selective-op", 3), "tokens", 2973});
  runs.push_back({"Llama 3 70B, 64 A100, FSDP", src, "a100-80g", fsdp(llama3("llama3-70b", 64)),
                  layout(64, 1, 1, 1, 1, "full", 3), "tokens", 331});
  runs.push_back({"Llama 3.1 8B, 8 H100 500 W, FSDP", src, "h100-gt500",
                  fsdp(llama3("llama3-8b", 16)), layout(8, 1, 1, 2, 1, "selective-op", 3), "tokens",
                  5762});
}

// BLOOM-176B (BigScience, bigscience-workshop/bigscience tr11-176B-ml) on Jean Zay: 384 A100 80GB,
// tp 4, pp 12, dp 8, micro-batch 2, 2048 sequences, full recompute, a ZeRO-1-like bf16 optimizer;
// 149.8 TFLOP/s by Megatron's count with recompute (the paper's eq. 3 coefficient).
void bloom(std::vector<PublishedRun>& runs) {
  Workload w = megatron_gpt(70, 14336, 112, 2048, 250880);
  w.dtype = "bf16";
  w.model.positions = "none";  // ALiBi: no position table
  w.stage_split = "count";     // pp_partition_method "type:transformer|embedding"
  runs.push_back({"BLOOM 176B, 384 A100", "BigScience tr11-176B-ml training log", "a100-jeanzay", w,
                  layout(384, 4, 12, 2, 1, "full", 1), "tflops", 149.77, "megatron2021"});
}

std::vector<PublishedRun> build() {
  std::vector<PublishedRun> runs;
  narayanan_2021(runs);
  korthikanti_2022(runs);
  llama3_table4(runs);
  nemo_h100(runs);
  torchtitan(runs);
  bloom(runs);
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
    it = by_options
             .emplace(run.plugin_options, PluginSources(plugins::Registry::default_dirs(),
                                                        "[plugins]\n" + run.plugin_options))
             .first;
  }
  return it->second;  // a copy shares the scan and the cost cache
}

double megatron_flops(const model::Config& m, int64_t batch) {
  const double B = double(batch), s = double(m.seq_len), l = double(m.n_layer),
               h = double(m.d_model), V = double(m.vocab_size);
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

// The FLOPs of one step as the source counts them.
double counted_flops(const PublishedRun& run, const Estimate& e) {
  const model::Config& m = run.workload.model;
  const double tokens = double(run.workload.global_batch) * double(m.seq_len);
  if (run.flops == "megatron2021") return megatron_flops(m, run.workload.global_batch);
  if (run.flops == "executed") return m.executed_flops_per_token() * tokens;
  return e.model_flops;  // "model": Loom's count, 6 N (head, no input embedding) + 12 L H Q T
}

double predicted_metric(const PublishedRun& run, const Estimate& e) {
  const double seconds = e.step_ms / 1e3;
  if (run.metric == "tflops") return counted_flops(run, e) / seconds / run.layout.world() / 1e12;
  if (run.metric == "mfu") return e.mfu * counted_flops(run, e) / e.model_flops;
  return e.tokens_per_s_per_device;
}

}  // namespace loom::plan
