#include "plan/estimate.hpp"

#include "core/errors.hpp"
#include "ops/ops.hpp"
#include "plan/step.hpp"

namespace loom::plan {

train::LayoutFacts layout_facts(const Workload& w, const Layout& l) {
  auto own = [](const std::string& mine, const char* builtin) {
    return mine.empty() ? std::string(builtin) : mine;
  };
  train::LayoutFacts f;
  f.model = &w.model;
  f.mesh.tp = l.tp, f.mesh.cp = l.cp, f.mesh.ep = l.ep, f.mesh.dp = l.dp, f.mesh.pp = l.pp;
  f.global_batch = w.global_batch, f.micro_batch = l.micro_batch, f.device = w.device;
  f.device_host_memory = ops::declared_host_reachable(w.device);
  if (l.world() > 1) f.comm = own(w.comm, "gloo");
  if (l.data_ranks() > 1) f.data = l.data_plugin(w);
  if (l.tp > 1) f.tensor = own(w.tensor_plugin, "tp");
  if (l.sp) f.sequence = own(w.sequence_plugin, "sp");
  if (l.cp > 1) f.context = own(w.context_plugin, "cp");
  if (l.ep > 1) f.expert = own(w.expert_plugin, "ep");
  if (l.pp > 1) f.pipeline = l.schedule;
  f.data_caps =
      LOOM_DATA_EXPERTS | LOOM_DATA_PIPELINE | (l.zero ? LOOM_DATA_SHARDED | LOOM_DATA_DEVICE : 0);
  return f;
}

std::string planner_limits(const Workload& w, const Layout& l) {
  const auto& m = w.model;
  if (l.micro_batch < 1)
    return "micro-batch " + std::to_string(l.micro_batch) + " is not a sequence count";
  if (m.n_layer < l.pp * l.chunks)
    return std::to_string(m.n_layer) + " blocks cannot fill pp " + std::to_string(l.pp) + " x " +
           std::to_string(l.chunks) + " chunks";
  if (l.cp > 1 && m.seq_len % (2 * l.cp))
    return "seq_len " + std::to_string(m.seq_len) +
           " is not a multiple of 2 cp (the zig-zag split)";
  if (l.zero && l.data_ranks() == 1) return "ZeRO needs more than one data-parallel rank";
  if (l.pp == 1 && (l.chunks > 1 || l.schedule != "1f1b"))
    return "a pipeline schedule (" + l.schedule + ") needs pp > 1";
  return "";
}

std::string invalid_reason(const Workload& w, const Layout& l) {
  const std::string limit = planner_limits(w, l);
  return limit.empty() ? train::layout_problem(layout_facts(w, l)) : limit;
}

namespace {

double count_moe(const model::Config& m) {
  double n = 0;
  for (int64_t i = 0; i < m.n_layer; ++i) n += m.is_moe_block(i) ? 1 : 0;
  return n;
}

}  // namespace

StagePart average_part(const model::Config& m, const Layout& l) {
  StagePart p;
  p.blocks = double(m.n_layer) / l.pp, p.moe_blocks = count_moe(m) / l.pp,
  p.head_share = 1.0 / l.pp;
  return p;
}

Estimate estimate(const Cluster& c, const Workload& w, const Layout& l, const CostSource& costs,
                  const PipeSource& pipes) {
  const std::string bad = invalid_reason(w, l);
  if (!bad.empty()) throw ConfigError("layout " + l.name() + ": " + bad);
  if (c.peak(w.dtype) <= 0)
    throw ConfigError("cluster '" + c.name + "' (" + c.source + ") gives no " + w.dtype +
                      " peak: set [device] peak_tflops_" + w.dtype +
                      " or plan another precision (--dtype)");
  Step s(c, w, l, average_part(w.model, l));
  s.compute();
  s.parameters();
  s.collectives(costs);
  s.loop(pipes);
  const double data_exposed = s.data_overlap();
  s.optimizer();
  s.e.step_ms = s.e.pipeline_ms + data_exposed + s.e.optimizer_ms + s.e.overhead_ms;
  s.memory();
  s.headline();
  return s.e;
}

StageEstimate estimate_stage(const Cluster& c, const Workload& w, const Layout& l,
                             const StagePart& part, int in_flight, const CostSource& costs) {
  Step s(c, w, l, part);
  s.compute();
  s.parameters();
  s.collectives(costs);
  s.shape.in_flight = in_flight;  // 1f1b or gpipe only (layout_costs): nothing deferred
  s.e.forward_ms = s.mbs * (s.f - s.loop_exposed[0]) * 1e3;
  s.e.recompute_ms = s.mbs * s.rc * 1e3;
  s.e.backward_ms = s.mbs * (s.b - s.loop_exposed[1] - s.rc) * 1e3;
  const double data_exposed = s.data_overlap();
  s.optimizer();
  s.memory();
  StageEstimate out;
  out.forward_ms = s.f * 1e3, out.backward_ms = s.b * 1e3, out.recompute_ms = s.rc * 1e3;
  out.after_loop_ms = data_exposed + s.e.optimizer_ms + s.e.overhead_ms;
  out.detail = s.e;
  return out;
}

}  // namespace loom::plan
