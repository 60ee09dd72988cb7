// The layouts of plugin ABI 1 (1.0 to 1.8) as a plugin binary built against them sees its tables,
// frozen here for the adapters that load those binaries (v1_adapter.cpp). Nothing else in the
// runtime uses them. The types ABI 2 kept unchanged (tensors, options, the services but
// loom.plugins, the store, shard pieces, slices, pipeline actions) are shared with
// <loom/plugin.h>; the op table is ABI 2's (tensor/ops_v2.h), whose prefix ABI 1's is. A table of
// minor m holds the entries up to m's; read base.v.size before a later one.
#pragma once

#include <loom/plugin.h>

#include "tensor/ops_v2.h"

namespace loom::plugins::v1 {

constexpr uint16_t kMajor = 1;
constexpr uint16_t kLastMinor = 8;
constexpr const char* kEntry = "loom_plugin_entry_v1";

struct host {
  loom_version v;
  const char* runtime_version;
  void (*log)(int32_t, const char*, const char*);
  loom_status (*set_error)(loom_error*, loom_status, const char*);
  loom_status (*opt_i64)(const loom_options*, const char*, int64_t*);
  loom_status (*opt_f64)(const loom_options*, const char*, double*);
  loom_status (*opt_bool)(const loom_options*, const char*, int32_t*);
  loom_status (*opt_str)(const loom_options*, const char*, const char**);
  void* (*alloc)(loom_device, size_t);
  void (*free)(loom_device, void*);
  const loom_ops_v2* ops;
  void* mesh;  // declared in 1.0 for subsystems that never came; always NULL
  void* params;
  void* hooks;
  void* timers;
  const void* (*service)(const char* name, uint32_t min_minor);  // 1.6
  loom_error* (*error_new)(void);
  void (*error_free)(loom_error*);
  const char* (*error_message)(const loom_error*);
};

struct plugin {
  loom_version v;
  int32_t kind;
  int32_t slot;
  const char* name;
  const char* version;
  const char* summary;
  const loom_option_spec* options;
  int32_t (*score)(const host*, const char**);
  loom_status (*create)(const host*, const loom_options*, void**, loom_error*);
  void (*destroy)(void*);
  const void* (*get_proc)(const char*);  // "loom_option_rules_v1", "loom_validate_options_v1",
                                         // "loom_cost_v1" (1.6, 1.7)
};
using validate_fn = loom_status (*)(const void* host, const loom_options*, loom_error*);
using cost_fn = loom_status (*)(const loom_cost_query*, loom_cost_collective*, int64_t, int64_t*,
                                loom_error*);  // 1.7
using entry_fn = loom_status (*)(const host*, const plugin* const**, size_t*, loom_error*);

// loom.plugins as a 1.6 plugin sees it: descriptors of ABI 1 layout.
struct plugins_service {
  loom_version v;
  loom_status (*create)(const char*, int32_t, const plugin**, void**, loom_error*);
  void (*release)(const plugin*, void*);
};

struct precision {
  plugin base;
  int32_t compute_dtype;
  int32_t exact;
  loom_status (*round_operand)(void*, loom_tensor*, int32_t, loom_error*);
  // 1.1: the format policy
  loom_status (*add_site)(void*, const char*, int32_t, int32_t*, loom_error*);
  loom_operand_format (*site_format)(void*, int32_t);
  void (*observe)(void*, int32_t, float, int32_t);
  double (*loss_scale)(void*);
  loom_status (*step_stats)(void*, float**, int64_t*, loom_error*);
  loom_status (*end_step)(void*, int32_t, int32_t*, loom_error*);
  int32_t (*metrics)(void*, const char**, double*, int32_t);
  loom_status (*save_state)(void*, void*, size_t, size_t*, loom_error*);
  loom_status (*load_state)(void*, const void*, size_t, loom_error*);
};

struct ckpt {
  plugin base;
  loom_status (*save)(void*, const char*, const char*, const void*, size_t, loom_error*);
  loom_status (*finish)(void*, loom_error*);
  loom_status (*poll)(void*, loom_error*);  // 1.1
  loom_status (*save_stable)(void*, const char*, const char*, const void*, size_t, loom_error*);
  uint64_t capabilities;  // 1.6
  loom_status (*open)(void*, const char*, int32_t, int32_t, loom_error*);
  loom_status (*read)(void*, const char*, const char*, void*, size_t, size_t*, loom_error*);
  loom_status (*list)(void*, const char*, char*, size_t, size_t*, loom_error*);
  loom_status (*committed)(void*, const char*, int64_t, loom_error*);
};

// The comm entries after the base have ABI 2's order and signatures.
struct comm {
  plugin base;
  decltype(loom_comm_v2::init) init;
  decltype(loom_comm_v2::split) split;
  decltype(loom_comm_v2::free_comm) free_comm;
  decltype(loom_comm_v2::rank) rank;
  decltype(loom_comm_v2::size) size;
  decltype(loom_comm_v2::all_reduce) all_reduce;
  decltype(loom_comm_v2::reduce_scatter) reduce_scatter;
  decltype(loom_comm_v2::all_gather) all_gather;
  decltype(loom_comm_v2::broadcast) broadcast;
  decltype(loom_comm_v2::all_to_all) all_to_all;
  decltype(loom_comm_v2::send) send;
  decltype(loom_comm_v2::recv) recv;
  decltype(loom_comm_v2::barrier) barrier;
  decltype(loom_comm_v2::wait) wait;
};

struct data_context {
  loom_version v;
  const comm* comm_table;
  void* comm_self;
  loom_comm* dp;
  float* values;
  float* grads;
  int64_t numel;
  const loom_param_info* params;
  int64_t n_params;
  const loom_data_unit* units;  // 1.2
  int64_t n_units;
  const int32_t* param_flags;
  const loom_ops_v2* ops;
  loom_comm* expert_dp;  // 1.3
};

struct data {
  plugin base;
  loom_status (*setup)(void*, const data_context*, loom_error*);
  loom_status (*grad_ready)(void*, int64_t, loom_error*);
  loom_status (*finish_grads)(void*, double*, double*, loom_error*);
  loom_status (*accounting)(void*, int64_t*, loom_error*);  // 1.2
  int32_t (*zero_stage)(void*);
  decltype(loom_data_sharded_v2::acquire_params) acquire_params;
  decltype(loom_data_sharded_v2::release_params) release_params;
  decltype(loom_data_sharded_v2::grad_buffer) grad_buffer;
  decltype(loom_data_sharded_v2::unit_grads_ready) unit_grads_ready;
  decltype(loom_data_sharded_v2::sum_squares) sum_squares;
  decltype(loom_data_sharded_v2::step) step;
  decltype(loom_data_sharded_v2::shard_pieces) shard_pieces;
  decltype(loom_data_sharded_v2::pieces_loaded) pieces_loaded;
  uint64_t capabilities;  // 1.6
  decltype(loom_data_v2::save_state) save_state;
  decltype(loom_data_v2::load_state) load_state;
};

struct tensor_context {
  loom_version v;
  const comm* comm_table;
  void* comm_self;
  loom_comm* tp;
  const loom_ops_v2* ops;
};

struct tensor {
  plugin base;
  loom_status (*setup)(void*, const tensor_context*, loom_error*);
  decltype(loom_tensor_v2::shard) shard;
  decltype(loom_tensor_v2::enter_bwd) enter_bwd;
  decltype(loom_tensor_v2::exit_fwd) exit_fwd;
  decltype(loom_tensor_v2::embedding_fwd) embedding_fwd;
  decltype(loom_tensor_v2::embedding_bwd) embedding_bwd;
  decltype(loom_tensor_v2::cross_entropy) cross_entropy;
};

struct sequence {
  plugin base;
  loom_status (*setup)(void*, const tensor_context*, loom_error*);
  decltype(loom_sequence_v2::gather) gather;
  decltype(loom_sequence_v2::scatter) scatter;
  decltype(loom_sequence_v2::reduce_replicated) reduce_replicated;
};

struct pipeline {  // 1.2
  plugin base;
  decltype(loom_pipeline_v2::configure) configure;
  decltype(loom_pipeline_v2::partition) partition;
  decltype(loom_pipeline_v2::schedule) schedule;
};

struct expert_context {  // 1.3
  loom_version v;
  const comm* comm_table;
  void* comm_self;
  loom_comm* ep;
  int32_t experts;
};

struct expert {
  plugin base;
  loom_status (*setup)(void*, const expert_context*, int32_t*, int32_t*, loom_error*);
  decltype(loom_expert_v2::exchange_counts) exchange_counts;
  decltype(loom_expert_v2::dispatch) dispatch;
  decltype(loom_expert_v2::combine) combine;
};

struct context_context {  // 1.5
  loom_version v;
  const comm* comm_table;
  void* comm_self;
  loom_comm* cp;
  const loom_ops_v2* ops;
  loom_device device;
};

struct context {
  plugin base;
  loom_status (*setup)(void*, const context_context*, loom_error*);
  decltype(loom_context_v2::split) split;
  decltype(loom_context_v2::attention_fwd) attention_fwd;
  decltype(loom_context_v2::attention_bwd) attention_bwd;
  decltype(loom_context_v2::stats) stats;
};

// Whether a table of ABI 1 holds `field` (its producer's size covers it).
template <class Table, class Field>
bool has(const Table* t, Field Table::*field) {
  static const Table probe{};
  const auto offset = static_cast<size_t>(reinterpret_cast<const char*>(&(probe.*field)) -
                                          reinterpret_cast<const char*>(&probe));
  return t->base.v.size >= offset + sizeof(Field);
}

}  // namespace loom::plugins::v1
