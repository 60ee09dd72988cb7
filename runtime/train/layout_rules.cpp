#include "train/layout_rules.hpp"

#include "core/errors.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/host.hpp"
#include "loader/plugin_settings.hpp"
#include "ops/ops.hpp"
#include "train/pipeline.hpp"
#include "train/settings.hpp"

namespace loom::train {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Every degree above 1 needs the plugin of its slot (default_plugins fills them for a job).
std::string missing_slot(const LayoutFacts& f) {
  const dist::MeshShape& m = f.mesh;
  if (m.world() > 1 && f.comm.empty())
    return "a run over " + str(m.world()) + " ranks needs [plugins] comm";
  if (m.data_ranks() > 1 && f.data.empty())
    return m.describe() + " needs [plugins] data (e.g. \"ddp\")";
  if (!f.sequence.empty() && m.tp == 1)
    return "[plugins] sequence = \"" + f.sequence +
           "\" needs [parallel] tp > 1: sequence parallelism splits rows over the tp group";
  if (m.tp > 1 && f.tensor.empty())
    return "[parallel] tp = " + str(m.tp) + " needs [plugins] tensor (e.g. \"tp\")";
  if (m.pp > 1 && f.pipeline.empty())
    return "[parallel] pp = " + str(m.pp) +
           " needs [plugins] pipeline (gpipe, 1f1b or interleaved)";
  if (m.cp > 1 && f.context.empty())
    return "[parallel] cp = " + str(m.cp) + " needs [plugins] context (e.g. \"cp\")";
  if (m.ep > 1 && f.expert.empty())
    return "[parallel] ep = " + str(m.ep) + " needs [plugins] expert (e.g. \"ep\")";
  return "";
}

// What the model must offer the degrees: experts for ep; whole heads, an even d_ff split and, under
// sp, an even row split for tp; whole positions for cp.
std::string model_split(const LayoutFacts& f) {
  const model::Config& mc = *f.model;
  const dist::MeshShape& m = f.mesh;
  if (m.ep > 1 && mc.moe.experts == 0)
    return "[parallel] ep = " + str(m.ep) +
           " needs a mixture-of-experts model: set [model.moe] experts (a multiple of ep)";
  if (m.ep > 1 && mc.moe.experts % m.ep != 0)
    return "[model.moe] experts = " + str(mc.moe.experts) +
           " is not a multiple of [parallel] ep = " + str(m.ep) +
           ": every ep rank holds the same number of experts";
  const std::string by_tp = " is not divisible by [parallel] tp = " + str(m.tp);
  if (mc.n_head % m.tp != 0) return "[model] n_head = " + str(mc.n_head) + by_tp;
  if (mc.kv_heads() % m.tp != 0)
    return "[model] n_kv_head = " + str(mc.kv_heads()) + by_tp +
           ": each tp rank holds whole key/value heads (use tp <= n_kv_head, a divisor of it)";
  if (mc.d_ff % m.tp != 0) return "[model] d_ff = " + str(mc.d_ff) + by_tp;
  const bool sp = !f.sequence.empty() && m.tp > 1;
  if (sp && mc.seq_len % m.tp != 0)
    return "[model] seq_len = " + str(mc.seq_len) + by_tp + " (sequence parallelism splits it)";
  // Under tp every tp rank runs the MoE layers on the same full rows (experts replicated over
  // tp); sequence parallelism would split the rows, and with them the routing.
  if (sp && mc.moe.experts > 0)
    return "[model.moe] experts = " + str(mc.moe.experts) +
           " with [plugins] sequence: Loom replicates experts over tp, "
           "so every tp rank routes the same full rows, and sequence parallelism splits exactly "
           "those rows over the "
           "tp ranks; use tp without sp for a MoE model";
  if (m.cp > 1 && mc.seq_len % m.cp != 0)
    return "[model] seq_len = " + str(mc.seq_len) +
           " is not a multiple of [parallel] cp = " + str(m.cp) +
           ": each cp rank holds an equal part of every sequence";
  return "";
}

// What the plugins must offer the layout: send and recv for cp's ring and pp's stages, the data
// plugin's declared capabilities, and device memory for a sharded plugin's state off the CPU.
std::string plugin_support(const LayoutFacts& f) {
  const dist::MeshShape& m = f.mesh;
  if ((m.cp > 1 || m.pp > 1) && !f.comm_p2p) {
    const std::string degree =
        m.cp > 1 ? "[parallel] cp = " + str(m.cp) : "[parallel] pp = " + str(m.pp);
    if (f.comm_send)
      return "[plugins] comm = \"" + f.comm +
             "\" has send and recv but does not declare LOOM_COMM_P2P" + f.comm_declared +
             ", and " + degree + " needs point-to-point transfers; use gloo, mpi or nccl";
    return degree + " needs a comm backend with send and recv, which [plugins] comm = \"" + f.comm +
           "\" does not offer; use gloo, mpi or nccl";
  }
  if (m.data_ranks() == 1) return "";  // no data plugin runs
  const std::string who = "[plugins] data = \"" + f.data + "\"";
  if (m.ep > 1 && !(f.data_caps & LOOM_DATA_EXPERTS))
    return who + " does not declare LOOM_DATA_EXPERTS" + f.data_declared +
           ", and [parallel] ep = " + str(m.ep) +
           " needs it: expert gradients are reduced over another group than the rest. Use ddp or "
           "zero1-3, or "
           "declare it once the plugin handles expert_dp";
  if (m.pp > 1 && !(f.data_caps & LOOM_DATA_PIPELINE))
    return who + " does not declare LOOM_DATA_PIPELINE" + f.data_declared +
           ", and [parallel] pp = " + str(m.pp) +
           " needs it: each stage holds only its own parameters, and a mirrored tied embedding "
           "must stay out of the norms";
  if ((f.data_caps & LOOM_DATA_SHARDED) && !(f.data_caps & LOOM_DATA_DEVICE) &&
      !f.device_host_memory)
    return who + " does not declare LOOM_DATA_DEVICE" + f.data_declared +
           ", so its shards may be host memory, which "
           "the kernels of a device the host cannot reach ([run] device = \"" +
           f.device +
           "\") cannot read; use "
           "zero1-3 or ddp";
  return "";
}

// A mixed cluster's groups hold whole pipeline stages.
std::string group_split(const LayoutFacts& f) {
  return dist::groups_problem(f.groups, f.nproc, f.mesh.world(), f.mesh.pp);
}

// The dp x ep ranks split the batch (expert parallelism is data parallelism outside the experts),
// each into whole micro-batches.
std::string batch_split(const LayoutFacts& f) {
  const int64_t data = int64_t(f.mesh.dp) * f.mesh.ep;
  const std::string over = f.mesh.ep > 1 ? "dp x ep = " + str(data) : "dp = " + str(data);
  if (f.global_batch % data != 0)
    return "[train] global_batch = " + str(f.global_batch) + " is not a multiple of " + over;
  const int64_t local = f.global_batch / data;
  if (f.micro_batch > 0 && local % f.micro_batch != 0)
    return "[train] global_batch = " + str(f.global_batch) + " over " + over + " is " + str(local) +
           " sequences per rank, not a multiple of micro_batch = " + str(f.micro_batch);
  return "";
}

// A memory cap is for a device's memory; the host heap has none.
std::string device_settings(const LayoutFacts& f) {
  if (f.device_memory > 0 && f.device_host_memory)
    return "[run] device_memory_mib caps a device's memory (strict, cuda); with [run] device = \"" +
           f.device + "\" tensors live on the host heap: remove it or set it to 0";
  return "";
}

}  // namespace

std::string layout_problem(const LayoutFacts& f) {
  for (auto rule :
       {device_settings, missing_slot, model_split, plugin_support, group_split, batch_split}) {
    std::string why = rule(f);
    if (!why.empty()) return why;
  }
  return "";
}

void comm_facts(LayoutFacts& f, const loom_plugin* comm) {
  if (!comm) return;
  const auto* t = reinterpret_cast<const loom_comm_v2*>(comm);
  f.comm = comm->name;
  f.comm_send = t->send && t->recv;
  f.comm_p2p = f.comm_send && (plugins::comm_capabilities(comm) & LOOM_COMM_P2P);
  f.comm_declared = plugins::declared_note(comm);
}

void data_facts(LayoutFacts& f, const loom_plugin* data) {
  if (!data) return;
  f.data = data->name;
  f.data_caps = plugins::data_capabilities(data);
  f.data_declared = plugins::declared_note(data);
}

LayoutFacts facts_of(const JobSettings& job, const plugins::Selection& selection,
                     const dist::MeshShape& mesh) {
  LayoutFacts f;
  f.model = &job.model;
  f.mesh = mesh;
  f.global_batch = job.train.global_batch;
  f.micro_batch = job.train.micro_batch;
  f.device = job.run.device;
  f.device_host_memory = ops::declared_host_reachable(f.device);
  f.device_memory = job.run.device_memory;
  f.groups = job.groups;
  f.nproc = job.parallel.nproc;
  auto name = [&](const char* slot) {
    const plugins::SlotChoice* c = selection.slot(slot);
    return c ? std::string(c->found.desc->name) : std::string();
  };
  f.tensor = name("tensor"), f.sequence = name("sequence"), f.context = name("context");
  f.expert = name("expert"), f.pipeline = name("pipeline");
  if (const plugins::SlotChoice* c = selection.slot("comm")) comm_facts(f, c->found.desc);
  if (const plugins::SlotChoice* c = selection.slot("data")) data_facts(f, c->found.desc);
  return f;
}

Settings settle_layout(const JobSettings& job, const plugins::Selection& selection,
                       const dist::MeshShape& mesh) {
  const std::string problem = layout_problem(facts_of(job, selection, mesh));
  if (!problem.empty()) throw ConfigError(problem);
  Settings s = job.train;
  const int64_t local_batch = s.global_batch / (int64_t{mesh.dp} * mesh.ep);
  if (s.micro_batch == 0) s.micro_batch = local_batch;
  s.accum = local_batch / s.micro_batch;
  return s;
}

void check_layout(const JobSettings& job, const plugins::Selection& selection,
                  const dist::MeshShape& mesh) {
  const Settings s = settle_layout(job, selection, mesh);
  if (mesh.pp > 1)
    plan_pipeline(job.parallel, selection, job.model, mesh.pp, static_cast<int>(s.accum));
}

}  // namespace loom::train
