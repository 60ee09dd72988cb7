#include "loader/descriptor.hpp"

#include <cstring>
#include <set>

#include "core/errors.hpp"

namespace loom::plugins {

const char* kind_name(int32_t kind) {
  switch (kind) {
    case LOOM_KIND_COMM: return "comm";
    case LOOM_KIND_PARALLEL: return "parallel";
    case LOOM_KIND_PRECISION: return "precision";
    case LOOM_KIND_CKPT: return "ckpt";
  }
  return "unknown";
}

const char* slot_name(int32_t slot) {
  switch (slot) {
    case LOOM_SLOT_DATA: return "data";
    case LOOM_SLOT_TENSOR: return "tensor";
    case LOOM_SLOT_SEQUENCE: return "sequence";
    case LOOM_SLOT_PIPELINE: return "pipeline";
    case LOOM_SLOT_EXPERT: return "expert";
    case LOOM_SLOT_CONTEXT: return "context";
  }
  return "";
}

size_t table_size(int32_t kind, int32_t slot) {
  switch (kind) {
    case LOOM_KIND_COMM: return sizeof(loom_comm_v1);
    case LOOM_KIND_PRECISION: return offsetof(loom_precision_v1, round_operand) + sizeof(void*);
    case LOOM_KIND_CKPT: return offsetof(loom_ckpt_v1, finish) + sizeof(void*);
    case LOOM_KIND_PARALLEL:
      switch (slot) {
        case LOOM_SLOT_DATA: return offsetof(loom_data_v1, finish_grads) + sizeof(void*);
        case LOOM_SLOT_TENSOR: return sizeof(loom_tensor_v1);
        case LOOM_SLOT_SEQUENCE: return sizeof(loom_sequence_v1);
        case LOOM_SLOT_PIPELINE: return sizeof(loom_pipeline_v1);
        case LOOM_SLOT_EXPERT: return sizeof(loom_expert_v1);
        case LOOM_SLOT_CONTEXT: return sizeof(loom_context_v1);
      }
  }
  return sizeof(loom_plugin);
}

namespace {

void check_options(const loom_plugin* d, const std::string& who) {
  std::set<std::string> seen;
  for (const loom_option_spec* o = d->options; o && o->name; ++o) {
    if (!*o->name) throw RuntimeError(who + " declares an option with an empty name");
    if (o->type < LOOM_OPT_INT || o->type > LOOM_OPT_STRING)
      throw RuntimeError(who + " declares option '" + o->name + "' of unknown type " + std::to_string(o->type));
    if (!o->default_value) throw RuntimeError(who + " declares option '" + o->name + "' without a default");
    if (!seen.insert(o->name).second) throw RuntimeError(who + " declares option '" + o->name + "' twice");
  }
}

}  // namespace

void check_descriptor(const loom_plugin* d, const std::string& library) {
  const std::string abi = std::to_string(d->v.major) + "." + std::to_string(d->v.minor);
  if (d->v.major != LOOM_ABI_MAJOR)
    throw RuntimeError("plugin in '" + library + "' was built for Loom plugin ABI " + abi + "; this runtime speaks ABI " +
                       std::to_string(LOOM_ABI_MAJOR) + "." + std::to_string(LOOM_ABI_MINOR));
  if (d->v.size < sizeof(loom_plugin) || !d->name || !d->create || !d->destroy)
    throw RuntimeError("plugin in '" + library + "' has an incomplete descriptor");
  const std::string who = "plugin '" + std::string(d->name) + "' in '" + library + "'";
  if (!*d->name) throw RuntimeError("plugin in '" + library + "' has an empty name");
  if (std::strcmp(kind_name(d->kind), "unknown") == 0)
    throw RuntimeError(who + " is of unknown kind " + std::to_string(d->kind));
  const bool slotted = d->kind == LOOM_KIND_PARALLEL;
  if (slotted != (d->slot != LOOM_SLOT_NONE) || (slotted && !*slot_name(d->slot)))
    throw RuntimeError(who + " names slot " + std::to_string(d->slot) + ", which a " + kind_name(d->kind) +
                       " plugin cannot have");
  if (d->v.size < table_size(d->kind, d->slot))
    throw RuntimeError(who + " has a " + std::to_string(d->v.size) + "-byte " + kind_name(d->kind) + " table; ABI " +
                       "1.0's is " + std::to_string(table_size(d->kind, d->slot)) + " bytes");
  check_options(d, who);
}

}  // namespace loom::plugins
