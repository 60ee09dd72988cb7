#include "plan/from_config.hpp"

#include "core/errors.hpp"
#include "gpt/config.hpp"

namespace loom::plan {

Workload workload_of(const config::Config& cfg, const std::string& dtype) {
  Workload w;
  w.model = gpt::from_config(cfg);
  w.global_batch = cfg.i64("train.global_batch");
  w.dtype = dtype.empty() ? cfg.str("plugins.precision") : dtype;
  if (w.dtype != "fp32" && w.dtype != "bf16" && w.dtype != "fp16" && w.dtype != "fp8")
    throw UsageError("precision '" + w.dtype + "': the planner knows fp32, bf16, fp16 and fp8");
  // Loom's ddp and zero reduce fp32 gradients; ddp can be told to send bf16.
  if (const toml::node* rd = cfg.table().at_path("plugins.ddp.reduce_dtype").node(); rd && rd->value<std::string>() == "bf16")
    w.grad_bytes = 2;
  // Slots the config fills with a plugin of its own are costed through that plugin.
  const std::string data = cfg.str("plugins.data");
  if (!data.empty() && data != "ddp" && data.rfind("zero", 0) != 0) w.data_plugin = data;
  auto own = [&](const char* key, const char* builtin) {
    const std::string v = cfg.str(key);
    return v == builtin ? std::string() : v;
  };
  w.tensor_plugin = own("plugins.tensor", "tp");
  w.sequence_plugin = own("plugins.sequence", "sp");
  w.context_plugin = own("plugins.context", "cp");
  w.expert_plugin = own("plugins.expert", "ep");
  return w;
}

Layout layout_of(const config::Config& cfg) {
  Layout l;
  l.tp = int(cfg.i64("parallel.tp")), l.pp = int(cfg.i64("parallel.pp")), l.cp = int(cfg.i64("parallel.cp"));
  l.ep = int(cfg.i64("parallel.ep"));
  const toml::node* dp = cfg.table().at_path("parallel.dp").node();
  l.dp = dp && dp->is_integer() ? int(dp->value<int64_t>().value())
                                : std::max<int>(1, int(cfg.i64("parallel.nproc")) / (l.tp * l.pp * l.cp * l.ep));
  const std::string data = cfg.str("plugins.data");
  l.zero = data.rfind("zero", 0) == 0 && data.size() == 5 ? data[4] - '0' : 0;
  l.sp = cfg.str("plugins.sequence") == "sp";
  if (l.pp > 1) {
    l.schedule = cfg.str("plugins.pipeline").empty() ? "1f1b" : cfg.str("plugins.pipeline");
    l.chunks = l.schedule == "interleaved" ? std::max<int>(2, int(cfg.i64("parallel.pp_chunks"))) : 1;
  }
  l.recompute = cfg.str("model.recompute");
  const int64_t micro = cfg.i64("train.micro_batch");
  l.micro_batch = int(micro > 0 ? micro : cfg.i64("train.global_batch") / (int64_t(l.dp) * l.ep));
  return l;
}

}  // namespace loom::plan
