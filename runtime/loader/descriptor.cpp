#include "loader/descriptor.hpp"

#include <cstring>
#include <set>
#include <vector>

#include <toml++/toml.h>

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

// A default is a TOML literal of the option's type: 16, 2.0, false, "max".
bool default_fits(const loom_option_spec* o) {
  toml::table t;
  try {
    t = toml::parse(std::string("v = ") + o->default_value);
  } catch (const toml::parse_error&) {
    return false;
  }
  const toml::node* v = t.get("v");
  switch (o->type) {
    case LOOM_OPT_INT: return v->is_integer();
    case LOOM_OPT_FLOAT: return v->is_floating_point() || v->is_integer();
    case LOOM_OPT_BOOL: return v->is_boolean();
    default: return v->is_string();
  }
}

void check_options(const loom_plugin* d, const std::string& who) {
  static const char* const type_names[] = {"an integer", "a float", "a boolean", "a quoted string"};
  std::set<std::string> seen;
  for (const loom_option_spec* o = d->options; o && o->name; ++o) {
    if (!*o->name) throw RuntimeError(who + " declares an option with an empty name");
    if (o->type < LOOM_OPT_INT || o->type > LOOM_OPT_STRING)
      throw RuntimeError(who + " declares option '" + o->name + "' of unknown type " + std::to_string(o->type));
    if (!o->default_value) throw RuntimeError(who + " declares option '" + o->name + "' without a default");
    if (!default_fits(o))
      throw RuntimeError(who + " declares option '" + o->name + "' with the default " + o->default_value + ", which is not " +
                         type_names[o->type - LOOM_OPT_INT] + " (a default is a TOML value of the option's type)");
    if (!seen.insert(o->name).second) throw RuntimeError(who + " declares option '" + o->name + "' twice");
  }
}

struct Entry {
  size_t offset;
  const char* name;
};
#define LOOM_ENTRY(table, field) Entry{offsetof(table, field), #field}

// The functions the runtime calls without asking whether they are there: a NULL one would be a
// segfault in the middle of a run, so it is refused at load. Entries documented as optional
// (comm send/recv, ckpt poll and later, data accounting and later) are not listed.
std::vector<Entry> required_entries(int32_t kind, int32_t slot) {
  switch (kind) {
    case LOOM_KIND_COMM:
      return {LOOM_ENTRY(loom_comm_v1, init),       LOOM_ENTRY(loom_comm_v1, split),
              LOOM_ENTRY(loom_comm_v1, free_comm),  LOOM_ENTRY(loom_comm_v1, rank),
              LOOM_ENTRY(loom_comm_v1, size),       LOOM_ENTRY(loom_comm_v1, all_reduce),
              LOOM_ENTRY(loom_comm_v1, barrier),    LOOM_ENTRY(loom_comm_v1, wait)};
    case LOOM_KIND_CKPT: return {LOOM_ENTRY(loom_ckpt_v1, save), LOOM_ENTRY(loom_ckpt_v1, finish)};
    case LOOM_KIND_PRECISION: return {};  // round_operand: see check_precision
  }
  switch (slot) {
    case LOOM_SLOT_DATA:
      return {LOOM_ENTRY(loom_data_v1, setup), LOOM_ENTRY(loom_data_v1, grad_ready),
              LOOM_ENTRY(loom_data_v1, finish_grads)};
    case LOOM_SLOT_TENSOR:
      return {LOOM_ENTRY(loom_tensor_v1, setup),         LOOM_ENTRY(loom_tensor_v1, shard),
              LOOM_ENTRY(loom_tensor_v1, enter_bwd),     LOOM_ENTRY(loom_tensor_v1, exit_fwd),
              LOOM_ENTRY(loom_tensor_v1, embedding_fwd), LOOM_ENTRY(loom_tensor_v1, embedding_bwd),
              LOOM_ENTRY(loom_tensor_v1, cross_entropy)};
    case LOOM_SLOT_SEQUENCE:
      return {LOOM_ENTRY(loom_sequence_v1, setup), LOOM_ENTRY(loom_sequence_v1, gather),
              LOOM_ENTRY(loom_sequence_v1, scatter), LOOM_ENTRY(loom_sequence_v1, reduce_replicated)};
    case LOOM_SLOT_PIPELINE:
      return {LOOM_ENTRY(loom_pipeline_v1, configure), LOOM_ENTRY(loom_pipeline_v1, partition),
              LOOM_ENTRY(loom_pipeline_v1, schedule)};
    case LOOM_SLOT_EXPERT:
      return {LOOM_ENTRY(loom_expert_v1, setup), LOOM_ENTRY(loom_expert_v1, exchange_counts),
              LOOM_ENTRY(loom_expert_v1, dispatch), LOOM_ENTRY(loom_expert_v1, combine)};
    case LOOM_SLOT_CONTEXT:
      return {LOOM_ENTRY(loom_context_v1, setup), LOOM_ENTRY(loom_context_v1, split),
              LOOM_ENTRY(loom_context_v1, attention_fwd), LOOM_ENTRY(loom_context_v1, attention_bwd),
              LOOM_ENTRY(loom_context_v1, stats)};
  }
  return {};
}
#undef LOOM_ENTRY

const void* pointer_at(const loom_plugin* d, size_t offset) {
  const void* p = nullptr;
  std::memcpy(&p, reinterpret_cast<const char*>(d) + offset, sizeof p);
  return p;
}

// A precision that is not exact rounds through round_operand (ABI 1.0) unless it sets the 1.1
// format policy, whose entries Precision checks when it is used.
void check_precision(const loom_plugin* d, const std::string& who) {
  const auto* t = reinterpret_cast<const loom_precision_v1*>(d);
  const bool policy = d->v.size >= offsetof(loom_precision_v1, site_format) + sizeof(void*) && t->site_format;
  if (!t->exact && !policy && !t->round_operand)
    throw RuntimeError(who + " is not exact and sets neither round_operand nor site_format: it cannot round an operand");
}

void check_entries(const loom_plugin* d, const std::string& who) {
  for (const Entry& e : required_entries(d->kind, d->slot))
    if (!pointer_at(d, e.offset))
      throw RuntimeError(who + " leaves " + e.name + " NULL, which every " +
                         (d->kind == LOOM_KIND_PARALLEL ? slot_name(d->slot) : kind_name(d->kind)) + " plugin must provide");
  if (d->kind == LOOM_KIND_PRECISION) check_precision(d, who);
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
  check_entries(d, who);
  check_options(d, who);
}

}  // namespace loom::plugins
