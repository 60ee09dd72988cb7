#include "loader/descriptor.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "core/errors.hpp"
#include "loader/abi_v1.hpp"

namespace loom::plugins {

const char* kind_name(int32_t kind) {
  switch (kind) {
    case LOOM_KIND_COMM:
      return "comm";
    case LOOM_KIND_PARALLEL:
      return "parallel";
    case LOOM_KIND_PRECISION:
      return "precision";
    case LOOM_KIND_CKPT:
      return "ckpt";
  }
  return "unknown";
}

const char* slot_name(int32_t slot) {
  switch (slot) {
    case LOOM_SLOT_DATA:
      return "data";
    case LOOM_SLOT_TENSOR:
      return "tensor";
    case LOOM_SLOT_SEQUENCE:
      return "sequence";
    case LOOM_SLOT_PIPELINE:
      return "pipeline";
    case LOOM_SLOT_EXPERT:
      return "expert";
    case LOOM_SLOT_CONTEXT:
      return "context";
  }
  return "";
}

size_t table_size(int32_t kind, int32_t slot, uint64_t data_capabilities) {
  switch (kind) {
    case LOOM_KIND_COMM:
      return offsetof(loom_comm_v2, group_start);  // ABI 2.0's; 2.4 appended
    case LOOM_KIND_PRECISION:
      return sizeof(loom_precision_v2);
    case LOOM_KIND_CKPT:
      return sizeof(loom_ckpt_v2);
    case LOOM_KIND_PARALLEL:
      switch (slot) {
        case LOOM_SLOT_DATA:
          return data_capabilities & LOOM_DATA_SHARDED ? sizeof(loom_data_sharded_v2)
                                                       : sizeof(loom_data_replicated_v2);
        case LOOM_SLOT_TENSOR:
          return sizeof(loom_tensor_v2);
        case LOOM_SLOT_SEQUENCE:
          return sizeof(loom_sequence_v2);
        case LOOM_SLOT_PIPELINE:
          return sizeof(loom_pipeline_v2);
        case LOOM_SLOT_EXPERT:
          return sizeof(loom_expert_v2);
        case LOOM_SLOT_CONTEXT:
          return sizeof(loom_context_v2);
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
    case LOOM_OPT_INT:
      return v->is_integer();
    case LOOM_OPT_FLOAT:
      return v->is_floating_point() || v->is_integer();
    case LOOM_OPT_BOOL:
      return v->is_boolean();
    default:
      return v->is_string();
  }
}

void check_options(const loom_option_spec* options, const std::string& who) {
  static const char* const type_names[] = {"an integer", "a float", "a boolean", "a quoted string"};
  std::set<std::string> seen;
  for (const loom_option_spec* o = options; o && o->name; ++o) {
    if (!*o->name) throw RuntimeError(who + " declares an option with an empty name");
    if (o->type < LOOM_OPT_INT || o->type > LOOM_OPT_STRING)
      throw RuntimeError(who + " declares option '" + o->name + "' of unknown type " +
                         std::to_string(o->type));
    if (!o->default_value)
      throw RuntimeError(who + " declares option '" + o->name + "' without a default");
    if (!default_fits(o))
      throw RuntimeError(who + " declares option '" + o->name + "' with the default " +
                         o->default_value + ", which is not " + type_names[o->type - LOOM_OPT_INT] +
                         " (a default is a TOML value of the option's type)");
    if (!seen.insert(o->name).second)
      throw RuntimeError(who + " declares option '" + o->name + "' twice");
  }
}

struct Entry {
  size_t offset;
  const char* name;
};
#define LOOM_ENTRY(table, field) \
  Entry { offsetof(table, field), #field }

// The entries the runtime calls without asking whether they are there: a NULL one would be a
// segfault in the middle of a run, so it is refused at load. The header marks the others optional.
std::vector<Entry> required_entries(int32_t kind, int32_t slot, uint64_t data_capabilities) {
  switch (kind) {
    case LOOM_KIND_COMM:
      return {LOOM_ENTRY(loom_comm_v2, init),           LOOM_ENTRY(loom_comm_v2, split),
              LOOM_ENTRY(loom_comm_v2, free_comm),      LOOM_ENTRY(loom_comm_v2, rank),
              LOOM_ENTRY(loom_comm_v2, size),           LOOM_ENTRY(loom_comm_v2, all_reduce),
              LOOM_ENTRY(loom_comm_v2, reduce_scatter), LOOM_ENTRY(loom_comm_v2, all_gather),
              LOOM_ENTRY(loom_comm_v2, broadcast),      LOOM_ENTRY(loom_comm_v2, all_to_all),
              LOOM_ENTRY(loom_comm_v2, barrier),        LOOM_ENTRY(loom_comm_v2, wait)};
    case LOOM_KIND_CKPT:
      return {LOOM_ENTRY(loom_ckpt_v2, save), LOOM_ENTRY(loom_ckpt_v2, finish)};
    case LOOM_KIND_PRECISION:
      return {};  // see check_pairs
  }
  switch (slot) {
    case LOOM_SLOT_DATA:
      if (data_capabilities & LOOM_DATA_SHARDED)
        return {LOOM_ENTRY(loom_data_v2, setup),
                LOOM_ENTRY(loom_data_v2, finish_grads),
                LOOM_ENTRY(loom_data_v2, accounting),
                LOOM_ENTRY(loom_data_sharded_v2, stage),
                LOOM_ENTRY(loom_data_sharded_v2, acquire_params),
                LOOM_ENTRY(loom_data_sharded_v2, release_params),
                LOOM_ENTRY(loom_data_sharded_v2, grad_buffer),
                LOOM_ENTRY(loom_data_sharded_v2, unit_grads_ready),
                LOOM_ENTRY(loom_data_sharded_v2, sum_squares),
                LOOM_ENTRY(loom_data_sharded_v2, step),
                LOOM_ENTRY(loom_data_sharded_v2, shard_pieces),
                LOOM_ENTRY(loom_data_sharded_v2, pieces_loaded)};
      return {LOOM_ENTRY(loom_data_v2, setup), LOOM_ENTRY(loom_data_v2, finish_grads),
              LOOM_ENTRY(loom_data_v2, accounting),
              LOOM_ENTRY(loom_data_replicated_v2, grad_ready)};
    case LOOM_SLOT_TENSOR:
      return {LOOM_ENTRY(loom_tensor_v2, setup),         LOOM_ENTRY(loom_tensor_v2, shard),
              LOOM_ENTRY(loom_tensor_v2, enter_bwd),     LOOM_ENTRY(loom_tensor_v2, exit_fwd),
              LOOM_ENTRY(loom_tensor_v2, embedding_fwd), LOOM_ENTRY(loom_tensor_v2, embedding_bwd),
              LOOM_ENTRY(loom_tensor_v2, cross_entropy)};
    case LOOM_SLOT_SEQUENCE:
      return {LOOM_ENTRY(loom_sequence_v2, setup), LOOM_ENTRY(loom_sequence_v2, gather),
              LOOM_ENTRY(loom_sequence_v2, scatter),
              LOOM_ENTRY(loom_sequence_v2, reduce_replicated)};
    case LOOM_SLOT_PIPELINE:
      return {LOOM_ENTRY(loom_pipeline_v2, configure), LOOM_ENTRY(loom_pipeline_v2, partition),
              LOOM_ENTRY(loom_pipeline_v2, schedule)};
    case LOOM_SLOT_EXPERT:
      return {LOOM_ENTRY(loom_expert_v2, setup), LOOM_ENTRY(loom_expert_v2, exchange_counts),
              LOOM_ENTRY(loom_expert_v2, dispatch), LOOM_ENTRY(loom_expert_v2, combine)};
    case LOOM_SLOT_CONTEXT:
      return {LOOM_ENTRY(loom_context_v2, setup), LOOM_ENTRY(loom_context_v2, split),
              LOOM_ENTRY(loom_context_v2, attention_fwd),
              LOOM_ENTRY(loom_context_v2, attention_bwd), LOOM_ENTRY(loom_context_v2, stats)};
  }
  return {};
}

// ABI 1's, for the adapters: the entries of its 1.0 tables (of the first minor of a later slot).
std::vector<Entry> required_v1_entries(int32_t kind, int32_t slot) {
  switch (kind) {
    case LOOM_KIND_COMM:
      return {LOOM_ENTRY(v1::comm, init),      LOOM_ENTRY(v1::comm, split),
              LOOM_ENTRY(v1::comm, free_comm), LOOM_ENTRY(v1::comm, rank),
              LOOM_ENTRY(v1::comm, size),      LOOM_ENTRY(v1::comm, all_reduce),
              LOOM_ENTRY(v1::comm, barrier),   LOOM_ENTRY(v1::comm, wait)};
    case LOOM_KIND_CKPT:
      return {LOOM_ENTRY(v1::ckpt, save), LOOM_ENTRY(v1::ckpt, finish)};
    case LOOM_KIND_PRECISION:
      return {};
  }
  switch (slot) {
    case LOOM_SLOT_DATA:
      return {LOOM_ENTRY(v1::data, setup), LOOM_ENTRY(v1::data, grad_ready),
              LOOM_ENTRY(v1::data, finish_grads)};
    case LOOM_SLOT_TENSOR:
      return {LOOM_ENTRY(v1::tensor, setup),         LOOM_ENTRY(v1::tensor, shard),
              LOOM_ENTRY(v1::tensor, enter_bwd),     LOOM_ENTRY(v1::tensor, exit_fwd),
              LOOM_ENTRY(v1::tensor, embedding_fwd), LOOM_ENTRY(v1::tensor, embedding_bwd),
              LOOM_ENTRY(v1::tensor, cross_entropy)};
    case LOOM_SLOT_SEQUENCE:
      return {LOOM_ENTRY(v1::sequence, setup), LOOM_ENTRY(v1::sequence, gather),
              LOOM_ENTRY(v1::sequence, scatter), LOOM_ENTRY(v1::sequence, reduce_replicated)};
    case LOOM_SLOT_PIPELINE:
      return {LOOM_ENTRY(v1::pipeline, configure), LOOM_ENTRY(v1::pipeline, partition),
              LOOM_ENTRY(v1::pipeline, schedule)};
    case LOOM_SLOT_EXPERT:
      return {LOOM_ENTRY(v1::expert, setup), LOOM_ENTRY(v1::expert, exchange_counts),
              LOOM_ENTRY(v1::expert, dispatch), LOOM_ENTRY(v1::expert, combine)};
    case LOOM_SLOT_CONTEXT:
      return {LOOM_ENTRY(v1::context, setup), LOOM_ENTRY(v1::context, split),
              LOOM_ENTRY(v1::context, attention_fwd), LOOM_ENTRY(v1::context, attention_bwd),
              LOOM_ENTRY(v1::context, stats)};
  }
  return {};
}
#undef LOOM_ENTRY

const void* pointer_at(const void* table, size_t offset) {
  const void* p = nullptr;
  std::memcpy(&p, static_cast<const char*>(table) + offset, sizeof p);
  return p;
}

// The bytes a table must cover: its last required entry.
size_t covered(const std::vector<Entry>& entries, size_t floor) {
  size_t end = floor;
  for (const Entry& e : entries) end = std::max(end, e.offset + sizeof(void*));
  return end;
}

std::string slot_or_kind(int32_t kind, int32_t slot) {
  return kind == LOOM_KIND_PARALLEL ? slot_name(slot) : kind_name(kind);
}

void check_entries(const void* table, const std::vector<Entry>& entries, const std::string& who,
                   int32_t kind, int32_t slot) {
  for (const Entry& e : entries)
    if (!pointer_at(table, e.offset))
      throw RuntimeError(who + " leaves " + e.name + " NULL, which every " +
                         slot_or_kind(kind, slot) + " plugin must provide");
}

// Entries that are optional together: both set or neither, and a precision that rounds.
void check_pairs(const loom_plugin* d, const std::string& who) {
  auto pair = [&](const void* a, const void* b, const char* names) {
    if ((a == nullptr) != (b == nullptr))
      throw RuntimeError(who + " sets one of " + names + " without the other");
  };
  if (d->kind == LOOM_KIND_CKPT) {
    const auto* t = reinterpret_cast<const loom_ckpt_v2*>(d);
    pair(reinterpret_cast<const void*>(t->read), reinterpret_cast<const void*>(t->list),
         "read and list");
  } else if (d->kind == LOOM_KIND_PRECISION) {
    const auto* t = reinterpret_cast<const loom_precision_v2*>(d);
    pair(reinterpret_cast<const void*>(t->save_state), reinterpret_cast<const void*>(t->load_state),
         "save_state and load_state");
    if (!t->exact && (!t->add_site || !t->site_format))
      throw RuntimeError(who +
                         " is not exact and leaves add_site or site_format NULL: it cannot say how "
                         "to round an operand");
  } else if (d->kind == LOOM_KIND_PARALLEL && d->slot == LOOM_SLOT_DATA) {
    const auto* t = reinterpret_cast<const loom_data_v2*>(d);
    pair(reinterpret_cast<const void*>(t->save_state), reinterpret_cast<const void*>(t->load_state),
         "save_state and load_state");
  }
}

// What both majors' descriptors share: a name, a known kind, a slot that fits it.
std::string check_head(const char* name, int32_t kind, int32_t slot, const std::string& library) {
  const std::string who = "plugin '" + std::string(name) + "' in '" + library + "'";
  if (!*name) throw RuntimeError("plugin in '" + library + "' has an empty name");
  if (std::strcmp(kind_name(kind), "unknown") == 0)
    throw RuntimeError(who + " is of unknown kind " + std::to_string(kind));
  const bool slotted = kind == LOOM_KIND_PARALLEL;
  if (slotted != (slot != LOOM_SLOT_NONE) || (slotted && !*slot_name(slot)))
    throw RuntimeError(who + " names slot " + std::to_string(slot) + ", which a " +
                       kind_name(kind) + " plugin cannot have");
  return who;
}

std::string abi_of(const loom_version& v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}

}  // namespace

std::string runtime_abi() {
  return "this runtime speaks ABI " + std::to_string(LOOM_ABI_MAJOR) + "." +
         std::to_string(LOOM_ABI_MINOR) + " (and loads ABI 1 and 2 through adapters)";
}

void widen_costs(const unsigned char* raw, int64_t n, size_t prefix, loom_cost_collective* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = loom_cost_collective{};
    std::memcpy(&out[i], raw + static_cast<size_t>(i) * kCostV2Size, prefix);
    out[i].what[sizeof out[i].what - 1] = '\0';
  }
}

void check_descriptor(const loom_plugin* d, const std::string& library, int major) {
  if (d->v.major != major)
    throw RuntimeError("plugin in '" + library + "' is returned by loom_plugin_entry_v" +
                       std::to_string(major) + " but claims plugin ABI " + abi_of(d->v) + "; " +
                       runtime_abi());
  if (major == 2 && d->v.minor > kLastV2Minor)  // ABI 2 ended at 2.7: a later 2.x is unknown
    throw RuntimeError("plugin in '" + library + "' was built for Loom plugin ABI " + abi_of(d->v) +
                       "; ABI 2 ended at 2." + std::to_string(kLastV2Minor) + ", and " +
                       runtime_abi());
  if (d->v.size < sizeof(loom_plugin) || !d->name || !d->create || !d->destroy)
    throw RuntimeError("plugin in '" + library + "' has an incomplete descriptor");
  const std::string who = check_head(d->name, d->kind, d->slot, library);
  const bool data = d->kind == LOOM_KIND_PARALLEL && d->slot == LOOM_SLOT_DATA;
  if (data && d->v.size < sizeof(loom_data_v2))
    throw RuntimeError(who + " has a " + std::to_string(d->v.size) +
                       "-byte data table; ABI 2.0's head is " +
                       std::to_string(sizeof(loom_data_v2)) + " bytes");
  const uint64_t caps = data ? reinterpret_cast<const loom_data_v2*>(d)->capabilities : 0;
  const size_t size = table_size(d->kind, d->slot, caps);
  if (d->v.size < size)
    throw RuntimeError(who + " has a " + std::to_string(d->v.size) + "-byte " +
                       slot_or_kind(d->kind, d->slot) + " table; ABI 2.0's is " +
                       std::to_string(size) + " bytes");
  check_entries(d, required_entries(d->kind, d->slot, caps), who, d->kind, d->slot);
  check_pairs(d, who);
  check_options(d->options, who);
}

void check_v1_descriptor(const v1::plugin* d, const std::string& library) {
  if (d->v.size < sizeof(v1::plugin) || !d->name || !d->create || !d->destroy)
    throw RuntimeError("plugin in '" + library + "' has an incomplete descriptor");
  if (d->v.minor > v1::kLastMinor)  // a minor past the last one has fields no adapter knows
    throw RuntimeError("plugin '" + std::string(d->name) + "' in '" + library +
                       "' was built for plugin ABI 1." + std::to_string(d->v.minor) +
                       "; ABI 1 ended at 1." + std::to_string(v1::kLastMinor) +
                       ": this runtime reads ABI 1.0-1." + std::to_string(v1::kLastMinor) +
                       " through its adapter and speaks " + std::to_string(LOOM_ABI_MAJOR) + "." +
                       std::to_string(LOOM_ABI_MINOR));
  const std::string who = check_head(d->name, d->kind, d->slot, library);
  const std::vector<Entry> entries = required_v1_entries(d->kind, d->slot);
  const size_t size = covered(entries, d->kind == LOOM_KIND_PRECISION
                                           ? offsetof(v1::precision, round_operand) + sizeof(void*)
                                           : sizeof(v1::plugin));
  if (d->v.size < size)
    throw RuntimeError(who + " has a " + std::to_string(d->v.size) + "-byte " +
                       slot_or_kind(d->kind, d->slot) + " table; ABI " + "1.0's is " +
                       std::to_string(size) + " bytes");
  check_entries(d, entries, who, d->kind, d->slot);
  if (d->kind == LOOM_KIND_PRECISION) {
    const auto* t = reinterpret_cast<const v1::precision*>(d);
    const bool policy = v1::has(t, &v1::precision::site_format) && t->site_format;
    if (!t->exact && !policy && !t->round_operand)
      throw RuntimeError(who +
                         " is not exact and sets neither round_operand nor site_format: it cannot "
                         "round an operand");
  }
  check_options(d->options, who);
}

}  // namespace loom::plugins
