#include "config/schema.hpp"

#include <algorithm>
#include <string_view>

#include "core/errors.hpp"

namespace loom::config {

const char* type_name(ValueType t) {
  switch (t) {
    case ValueType::Int: return "integer";
    case ValueType::Float: return "float";
    case ValueType::Bool: return "boolean";
    case ValueType::String: return "string";
    case ValueType::StringList: return "array of strings";
    case ValueType::IntOrAuto: return "integer or \"auto\"";
    case ValueType::FloatList: return "array of numbers";
  }
  return "?";
}

const std::vector<SlotKey>& slot_keys() {
  static const std::vector<SlotKey> keys = {
      {"comm", LOOM_KIND_COMM, LOOM_SLOT_NONE},
      {"data", LOOM_KIND_PARALLEL, LOOM_SLOT_DATA},
      {"tensor", LOOM_KIND_PARALLEL, LOOM_SLOT_TENSOR},
      {"sequence", LOOM_KIND_PARALLEL, LOOM_SLOT_SEQUENCE},
      {"pipeline", LOOM_KIND_PARALLEL, LOOM_SLOT_PIPELINE},
      {"expert", LOOM_KIND_PARALLEL, LOOM_SLOT_EXPERT},
      {"context", LOOM_KIND_PARALLEL, LOOM_SLOT_CONTEXT},
      {"precision", LOOM_KIND_PRECISION, LOOM_SLOT_NONE},
      {"ckpt", LOOM_KIND_CKPT, LOOM_SLOT_NONE},
  };
  return keys;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

KeySpec slot_key(const char* name, const char* help) {
  return {name, ValueType::String, "\"\"", help};
}

std::vector<SectionSpec> build_schema() {
  std::vector<SectionSpec> s;
  s.push_back({"run", "what to run and where its outputs go", {
      {"name", ValueType::String, "\"\"", "run name; default: the config file's stem"},
      {"dir", ValueType::String, "\"\"", "run directory; default: runs/<name>"},
      {"seed", ValueType::Int, "1234", "seeds initialisation, data order and sampling", 0, kInf},
      {"device", ValueType::String, "\"cpu\"", "device the op table runs on", -kInf, kInf,
       {"cpu", "cuda"}},
      {"threads", ValueType::Int, "0", "CPU threads for kernels; 0 = all cores, fewer while other processes keep some busy (one rank per machine)", 0, 4096},
      {"log_every", ValueType::Int, "1", "print a step line every N steps", 1, kInf},
      {"peak_gflops", ValueType::Float, "0", "device peak for MFU; 0 = table or measured", 0, kInf},
      {"profile_layer", ValueType::Bool, "false", "time block 0 segment by segment; table at the end"},
      {"trace", ValueType::Bool, "false", "write a Chrome trace-event JSON per rank (run dir/trace/rank<N>.json)"},
  }});
  s.push_back({"stability", "catching what goes wrong in a run, layer by layer (docs/stability.md)", {
      {"enabled", ValueType::Bool, "true", "watch every step: non-finite values, spikes, replicas"},
      {"nonfinite", ValueType::String, "\"skip\"", "a non-finite loss or gradient: skip the step, or fail the run",
       -kInf, kInf, {"skip", "fail"}},
      {"window", ValueType::Int, "50", "steps of loss and grad-norm history for spike z-scores", 2, kInf},
      {"min_steps", ValueType::Int, "10", "steps of history before spikes are judged", 2, kInf},
      {"zscore", ValueType::Float, "6.0", "a loss or grad norm this many deviations above the window's mean is a spike", 0, kInf},
      {"action", ValueType::String, "\"log\"", "on a spike: log it, or also skip the update", -kInf, kInf,
       {"log", "skip"}},
      {"check_every", ValueType::Int, "100", "compare dp replicas' parameters and re-check a collective every N steps; 0 = never", 0, kInf},
  }});
  s.push_back({"checkpoint", "saving and resuming training state (docs/checkpoints.md); the writer is [plugins] ckpt", {
      {"dir", ValueType::String, "\"\"", "where step directories go; \"\" = <run dir>/checkpoints"},
      {"every", ValueType::Int, "0", "save after every N steps (and after the last); 0 = never", 0, kInf},
      {"keep_last", ValueType::Int, "3", "committed checkpoints kept; the newest is never deleted", 1, kInf},
      {"resume", ValueType::String, "\"\"", "\"latest\", \"auto\" (latest if there is one, else start fresh) or a step directory to resume from; \"\" = start fresh"},
      {"on_signal", ValueType::String, "\"save\"", "on SIGTERM or SIGINT: finish the step, then save a checkpoint (when every > 0) and exit 3, or just exit 3",
       -kInf, kInf, {"save", "exit"}},
  }});
  s.push_back({"faults", "fault injection, for tests of the paths above (all off by default)", {
      {"inf_loss_step", ValueType::Int, "0", "at this step one rank's loss gradient is inf", 0, kInf},
      {"inf_loss_rank", ValueType::Int, "0", "the rank inf_loss_step poisons", 0, 65535},
      {"nan_grad_step", ValueType::Int, "0", "at this step one parameter's gradient gets a NaN", 0, kInf},
      {"nan_grad_param", ValueType::String, "\"\"", "the parameter nan_grad_step poisons (every rank)"},
      {"bad_batch_step", ValueType::Int, "0", "at this step every sample's targets are scrambled (a loss spike)", 0, kInf},
      {"perturb_step", ValueType::Int, "0", "at this step one rank's parameters are nudged off its replicas", 0, kInf},
      {"perturb_rank", ValueType::Int, "0", "the rank perturb_step nudges", 0, 65535},
      {"ckpt_write_error_step", ValueType::Int, "0", "the checkpoint of this step fails to write (a full disk)", 0, kInf},
      {"slow_step", ValueType::Float, "0.0", "every step sleeps this fraction of its own time (0.15: 15% slower), for loom compare", 0, 100},
  }});
  SectionSpec model{"model", "the network: a decoder-only transformer, GPT-2 to Llama 3 (docs/models.md)", {
      {"preset", ValueType::String, "\"\"", "fill unset keys from a preset (loom model info PRESET)", -kInf, kInf,
       model_preset_names()},
      {"n_layer", ValueType::Int, "4", "transformer blocks", 1, 1024},
      {"n_head", ValueType::Int, "4", "attention (query) heads", 1, 1024},
      {"n_kv_head", ValueType::Int, "0", "key/value heads: 1 = multi-query, n_head = multi-head; 0 = n_head", 0, 1024},
      {"d_model", ValueType::Int, "128", "residual stream width", 1, 65536},
      {"d_ff", ValueType::Int, "0", "MLP hidden width; 0 = 4 * d_model, or Llama's rounding when multiple_of > 0", 0, 1 << 20},
      {"ffn_dim_multiplier", ValueType::Float, "0.0", "Llama: d_ff = multiplier x 2/3 x 4 d_model (0 = 1) ...", 0, 64},
      {"multiple_of", ValueType::Int, "0", "... rounded up to a multiple of this (with d_ff = 0); 0 = off", 0, 1 << 20},
      {"vocab_size", ValueType::Int, "256", "vocabulary (256 = bytes)", 2, 1 << 24},
      {"seq_len", ValueType::Int, "128", "context length T", 1, 1 << 20},
      {"positions", ValueType::String, "\"learned\"", "learned (a table of max_positions rows) | rope | none",
       -kInf, kInf, {"learned", "rope", "none"}},
      {"max_positions", ValueType::Int, "0", "rows of the learned position table; 0 = seq_len", 0, 1 << 20},
      {"rope_theta", ValueType::Float, "10000.0", "RoPE base: 10000 (GPT-NeoX, Llama 2), 500000 (Llama 3)", -kInf, kInf},
      {"norm", ValueType::String, "\"layernorm\"", "layernorm | rmsnorm", -kInf, kInf,
       {"layernorm", "rmsnorm"}},
      {"norm_eps", ValueType::Float, "1e-5", "epsilon of every norm", 0, 1},
      {"bias", ValueType::Bool, "true", "biases in every linear layer and LayerNorm (false: Llama)"},
      {"mlp", ValueType::String, "\"gelu\"", "gelu (tanh form) | swiglu", -kInf, kInf,
       {"gelu", "swiglu"}},
      {"tied_embeddings", ValueType::Bool, "true", "share the token embedding with the LM head"},
      {"init_std", ValueType::Float, "0.02", "std of weight init (residual projections / sqrt(2L))",
       0, 10},
      {"recompute", ValueType::String, "\"none\"",
       "activation recomputation: none | selective (norms and MLP activation, no GEMM) | full (the whole block)",
       -kInf, kInf, {"none", "selective", "full"}},
      {"recompute_layers", ValueType::Int, "0", "recompute the first N blocks of each pipeline chunk; 0 = all", 0, 1024},
      {"init_from", ValueType::String, "\"\"", "start from these weights: a Loom checkpoint (any layout), a Hugging Face "
       "folder or an llm.c model file; the optimizer starts fresh"},
  }};
  SectionSpec moe{"model.moe", "mixture of experts: every `every`-th block's MLP routed to `experts` MLPs", {
      {"experts", ValueType::Int, "0", "experts per MoE layer; 0 = a dense model", 0, 4096},
      {"top_k", ValueType::Int, "2", "experts each token goes to", 1, 64},
      {"every", ValueType::Int, "2", "every this many blocks (the last of each group) is MoE", 1, 1024},
      {"capacity_factor", ValueType::Float, "1.25", "per-expert slots = ceil(factor x tokens x top_k / experts)", -kInf, kInf},
      {"dropless", ValueType::Bool, "false", "no capacity: every routed token is computed"},
      {"aux_coef", ValueType::Float, "0.01", "load-balancing loss coefficient (Switch/GShard form)", 0, kInf},
      {"z_coef", ValueType::Float, "0.0", "router z-loss coefficient", 0, kInf},
  }};
  SectionSpec rope_scaling{"model.rope_scaling", "RoPE frequency scaling for long context (Llama 3.1)", {
      {"type", ValueType::String, "\"none\"", "none | llama3", -kInf, kInf, {"none", "llama3"}},
      {"factor", ValueType::Float, "8.0", "low frequencies are divided by this", -kInf, kInf},
      {"low_freq_factor", ValueType::Float, "1.0", "wavelengths above original_max_position / this are scaled", -kInf, kInf},
      {"high_freq_factor", ValueType::Float, "4.0", "wavelengths below original_max_position / this are kept", -kInf, kInf},
      {"original_max_position", ValueType::Int, "8192", "the context the model was pre-trained at", 1, 1 << 24},
  }};
  model.presets = model_presets();
  s.push_back(model);
  s.push_back(moe);
  s.push_back(rope_scaling);
  s.push_back({"data", "training and validation tokens", {
      {"dir", ValueType::String, "\"data/fortunes\"",
       "directory of llm.c token shards: *train*.bin and *val*.bin (loom data prepare)"},
      {"sampling", ValueType::String, "\"random\"", "random: windows anywhere, with replacement (llm.c); "
       "epoch: every window once per epoch, in a seeded order", -kInf, kInf, {"random", "epoch"}},
      {"tokenizer", ValueType::String, "\"\"", "tokenizer.json for text samples; \"\" = the one beside the shards, if any"},
  }});
  s.push_back({"train", "optimisation", {
      {"steps", ValueType::Int, "100", "optimizer steps", 1, kInf},
      {"exit_after", ValueType::Int, "0", "stop after this step, as a preempted job would (the schedule still spans steps); 0 = run to the end", 0, kInf},
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
      {"grad_clip", ValueType::Float, "1.0", "clip the global grad norm to this; 0 = off", 0, kInf},
      {"eval_every", ValueType::Int, "50", "validation loss every N steps; 0 = never", 0, kInf},
      {"eval_batches", ValueType::Int, "8", "validation batches of global_batch windows per evaluation (the same windows under every layout)", 1, kInf},
      {"sample_every", ValueType::Int, "0", "print a text sample every N steps; 0 = never", 0, kInf},
      {"sample_tokens", ValueType::Int, "96", "tokens per sample", 1, kInf},
      {"sample_top_k", ValueType::Int, "8", "sample from the k likeliest tokens; 1 = greedy", 1, kInf},
      {"sample_prompt", ValueType::String, "\"\"", "text the sample continues"},
  }});
  s.push_back({"parallel", "the device mesh: tp (innermost) -> cp -> ep -> dp -> pp", {
      {"nproc", ValueType::Int, "1", "ranks `loom train` spawns when no launcher started it", 1, 4096},
      {"dp", ValueType::IntOrAuto, "\"auto\"", "data-parallel degree; auto = world / (tp pp ep cp)", 1, 65536},
      {"tp", ValueType::Int, "1", "tensor-parallel degree", 1, 4096},
      {"pp", ValueType::Int, "1", "pipeline-parallel degree", 1, 4096},
      {"pp_chunks", ValueType::Int, "0", "model chunks per pp rank (interleaved); 0 = the schedule's default", 0, 64},
      {"pp_layout", ValueType::String, "\"\"", "layer split over pp stages, e.g. \"E t t | t t L\"; \"\" = balanced by cost"},
      {"ep", ValueType::Int, "1", "expert-parallel degree", 1, 4096},
      {"cp", ValueType::Int, "1", "context-parallel degree: each rank holds seq_len / cp positions of every sequence", 1, 4096},
      {"timeout_s", ValueType::Int, "60", "a collective or rendezvous silent this long fails", 1, 86400},
      {"interface", ValueType::String, "\"\"",
       "network interface the ranks talk on (e.g. \"eth0\"); \"\" = GLOO_SOCKET_IFNAME, else the one that routes to MASTER_ADDR"},
  }});
  s.push_back({"plugins", "which plugin fills each slot; [plugins.<name>] holds its options", {
      {"path", ValueType::StringList, "[]", "extra directories searched for plugins first"},
      slot_key("comm", "communication backend (gloo, mpi, nccl); \"\" = gloo when world > 1"),
      slot_key("data", "data-parallel strategy (ddp, zero1, zero2, zero3); \"\" = ddp when dp > 1"),
      slot_key("tensor", "tensor-parallel strategy (tp)"),
      slot_key("sequence", "sequence-parallel strategy (sp)"),
      slot_key("pipeline", "pipeline schedule (gpipe, 1f1b, interleaved); \"\" = 1f1b when pp > 1"),
      slot_key("expert", "expert-parallel strategy (ep); \"\" = ep when ep > 1"),
      slot_key("context", "context-parallel attention (cp); \"\" = cp when cp > 1"),
      {"precision", ValueType::String, "\"fp32\"", "GEMM and optimizer numerics"},
      slot_key("ckpt", "checkpoint writer (sync, async); \"\" = no checkpoints"),
  }, true});
  return s;
}

}  // namespace

const std::vector<SectionSpec>& runtime_schema() {
  static const std::vector<SectionSpec> schema = build_schema();
  return schema;
}

std::vector<KeySpec> plugin_keys(const loom_option_spec* options) {
  std::vector<KeySpec> keys;
  for (const loom_option_spec* o = options; o && o->name; ++o) {
    ValueType t = ValueType::String;
    switch (o->type) {
      case LOOM_OPT_INT: t = ValueType::Int; break;
      case LOOM_OPT_FLOAT: t = ValueType::Float; break;
      case LOOM_OPT_BOOL: t = ValueType::Bool; break;
      default: t = ValueType::String; break;
    }
    keys.push_back({o->name, t, o->default_value ? o->default_value : "", o->help ? o->help : ""});
  }
  return keys;
}

std::vector<KeySpec> plugin_keys(const loom_plugin* d) {
  std::vector<KeySpec> keys = plugin_keys(d->options);
  const auto* rules = d->get_proc ? static_cast<const loom_option_rule*>(d->get_proc(LOOM_PROC_OPTION_RULES)) : nullptr;
  for (const loom_option_rule* r = rules; r && r->name; ++r) {
    auto k = std::find_if(keys.begin(), keys.end(), [&](const KeySpec& s) { return s.name == r->name; });
    if (k == keys.end())
      throw RuntimeError("plugin '" + std::string(d->name) + "' has a rule for option '" + r->name +
                         "', which its schema does not declare");
    if (r->min <= r->max) k->min = r->min, k->max = r->max;
    for (std::string_view c = r->choices ? r->choices : ""; !c.empty();) {
      const size_t bar = c.find('|');
      k->choices.emplace_back(c.substr(0, bar));
      c = bar == std::string_view::npos ? std::string_view() : c.substr(bar + 1);
    }
    k->required = r->required != 0;
  }
  return keys;
}

}  // namespace loom::config
