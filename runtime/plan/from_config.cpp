#include "plan/from_config.hpp"

#include "config/config.hpp"
#include "core/errors.hpp"

namespace loom::plan {

Workload workload_of(const train::JobSettings& job, const std::string& dtype) {
  Workload w;
  w.model = job.model;
  const plugins::PluginSettings& slots = job.plugins;
  w.global_batch = job.train.global_batch;
  w.dtype = dtype.empty() ? slots.slot("precision") : dtype;
  if (w.dtype != "fp32" && w.dtype != "bf16" && w.dtype != "fp16" && w.dtype != "fp8")
    throw UsageError("precision '" + w.dtype + "': the planner knows fp32, bf16, fp16 and fp8");
  // Gradients are as wide as the master weights (fp32); a data plugin whose options narrow its
  // wire (ddp's reduce_dtype) says so in its cost entry, which sees them.
  // Slots the config fills with a plugin of its own are costed through that plugin.
  const std::string data = slots.slot("data");
  if (!data.empty() && data != "ddp" && data.rfind("zero", 0) != 0) w.data_plugin = data;
  auto own = [&](const char* slot, const char* builtin) {
    const std::string v = slots.slot(slot);
    return v == builtin ? std::string() : v;
  };
  w.tensor_plugin = own("tensor", "tp");
  w.sequence_plugin = own("sequence", "sp");
  w.context_plugin = own("context", "cp");
  w.expert_plugin = own("expert", "ep");
  w.unfused_attention = job.plan.unfused_attention;
  w.stage_split = job.plan.stage_split;
  w.device = job.run.device;
  w.comm = slots.slot("comm");
  if (!slots.tables.empty()) {  // the plugin's options, as its run reads them
    const config::Config tables = config::Config::parse(slots.tables, "<plan: [plugins]>");
    const auto& zero3 = tables.table();
    if (auto depth = zero3.at_path("plugins.zero3.prefetch_depth").value<int64_t>())
      w.zero3_prefetch_depth = int(std::max<int64_t>(1, *depth));
    if (!zero3.at_path("plugins.zero3.prefetch").value<bool>().value_or(true))
      w.zero3_prefetch_depth = 0;  // no unit is gathered ahead
  }
  return w;
}

Workload on_cluster(Workload w, const Cluster& c) {
  if (c.run_device != "cpu") w.device = c.run_device, w.comm = c.comm, w.comm_of_cluster = true;
  return w;
}

Layout layout_of(const train::JobSettings& job, int world) {
  Layout l;
  const dist::ParallelSettings& par = job.parallel;
  const plugins::PluginSettings& slots = job.plugins;
  const train::Settings& train = job.train;
  l.tp = par.tp, l.pp = par.pp, l.cp = par.cp, l.ep = par.ep;
  l.dp = par.dp > 0
             ? par.dp
             : std::max<int>(1, int(world > 0 ? world : par.nproc) / (l.tp * l.pp * l.cp * l.ep));
  const std::string data = slots.slot("data");
  l.zero = data.rfind("zero", 0) == 0 && data.size() == 5 ? data[4] - '0' : 0;
  l.sp = slots.slot("sequence") == "sp";
  if (l.pp > 1) {
    l.schedule = slots.slot("pipeline").empty() ? "1f1b" : slots.slot("pipeline");
    l.chunks = l.schedule == "interleaved" ? std::max<int>(2, par.pp_chunks) : 1;
  }
  l.recompute = job.plan.recompute.empty() ? job.model.recompute : job.plan.recompute;
  l.micro_batch =
      int(train.micro_batch > 0 ? train.micro_batch : train.global_batch / (int64_t(l.dp) * l.ep));
  return l;
}

// The slots' plugins are layout_facts', the ones the planner checked the layout with.
std::vector<std::string> layout_sets(const Workload& w, const Layout& l) {
  auto n = [](int64_t v) { return std::to_string(v); };
  auto slot = [](const char* name, const std::string& plugin) {
    return std::string("plugins.") + name + "=\"" + plugin + "\"";
  };
  const train::LayoutFacts f = layout_facts(w, l);
  std::vector<std::string> sets = {
      "parallel.nproc=" + n(l.world()),
      "parallel.dp=" + n(l.dp),
      "parallel.tp=" + n(l.tp),
      "parallel.pp=" + n(l.pp),
      "parallel.cp=" + n(l.cp),
      "parallel.ep=" + n(l.ep),
      "parallel.pp_chunks=" + n(l.schedule == "interleaved" ? l.chunks : 0),
      "train.micro_batch=" + n(l.micro_batch),
      "model.recompute=\"" + l.recompute + "\"",
      slot("tensor", f.tensor),
      slot("sequence", f.sequence),
      slot("context", f.context),
      slot("expert", f.expert),
      slot("pipeline", f.pipeline)};
  if (!f.data.empty()) sets.push_back(slot("data", f.data));
  return sets;
}

}  // namespace loom::plan
