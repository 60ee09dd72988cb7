#include "config/schema.hpp"

namespace loom::config {

const char* type_name(ValueType t) {
  switch (t) {
    case ValueType::Int: return "integer";
    case ValueType::Float: return "float";
    case ValueType::Bool: return "boolean";
    case ValueType::String: return "string";
    case ValueType::StringList: return "array of strings";
    case ValueType::IntOrAuto: return "integer or \"auto\"";
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
      {"threads", ValueType::Int, "0", "CPU threads for kernels; 0 = all cores", 0, 4096},
      {"log_every", ValueType::Int, "1", "print a step line every N steps", 1, kInf},
  }});
  s.push_back({"plugins", "which plugin fills each slot; [plugins.<name>] holds its options", {
      {"path", ValueType::StringList, "[]", "extra directories searched for plugins first"},
      slot_key("comm", "communication backend (gloo, mpi, nccl); \"\" = single process"),
      slot_key("data", "data-parallel strategy (ddp, zero1, zero2, zero3)"),
      slot_key("tensor", "tensor-parallel strategy (tp)"),
      slot_key("sequence", "sequence-parallel strategy (sp)"),
      slot_key("pipeline", "pipeline schedule (gpipe, 1f1b, interleaved)"),
      slot_key("expert", "expert-parallel strategy (ep)"),
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

}  // namespace loom::config
