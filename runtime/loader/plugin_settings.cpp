#include "loader/plugin_settings.hpp"

#include "core/errors.hpp"

namespace loom::config {

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

}  // namespace loom::config

namespace loom::plugins {

namespace {
using config::ValueType;
config::KeySpec slot_key(const char* name, const char* help) {
  return {name, ValueType::String, "\"\"", help};
}
}  // namespace

config::SectionSpec plugins_section() {
  return {
      "plugins",
      "which plugin fills each slot; [plugins.<name>] holds its options",
      {
          {"path", ValueType::StringList, "[]", "extra directories searched for plugins first"},
          slot_key("comm", "communication backend (gloo, mpi, nccl); \"\" = gloo when world > 1"),
          slot_key("data",
                   "data-parallel strategy (ddp, zero1, zero2, zero3); \"\" = ddp when dp > 1"),
          slot_key("tensor", "tensor-parallel strategy (tp)"),
          slot_key("sequence", "sequence-parallel strategy (sp)"),
          slot_key("pipeline",
                   "pipeline schedule (gpipe, 1f1b, interleaved); \"\" = 1f1b when pp > 1"),
          slot_key("expert", "expert-parallel strategy (ep); \"\" = ep when ep > 1"),
          slot_key("context", "context-parallel attention (cp); \"\" = cp when cp > 1"),
          {"precision", ValueType::String, "\"fp32\"", "GEMM and optimizer numerics"},
          slot_key("ckpt", "checkpoint writer (sync, async); \"\" = no checkpoints"),
      },
      true};
}

PluginSettings read_plugins(const config::Section& plugins) {
  PluginSettings p;
  p.path = plugins.str_list("path");
  for (const auto& sk : config::slot_keys()) p.plugin_of[sk.key] = plugins.str(sk.key);
  p.tables = plugins.toml();
  return p;
}

std::string PluginSettings::slot(const std::string& name) const {
  const auto it = plugin_of.find(name);
  if (it == plugin_of.end()) throw RuntimeError("no plugin slot named '" + name + "'");
  return it->second;
}

}  // namespace loom::plugins
