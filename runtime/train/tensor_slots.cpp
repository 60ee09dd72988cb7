#include "train/tensor_slots.hpp"

#include <cctype>
#include <cmath>

#include "core/errors.hpp"
#include "loader/services.hpp"
#include "model/model.hpp"
#include "parallel/context_attention.hpp"
#include "parallel/expert_dispatch.hpp"
#include "parallel/plugin_layers.hpp"
#include "train/settings.hpp"

namespace loom::train {

TensorSlots::TensorSlots(const model::Config& mc, const std::string& device,
                         const plugins::Selection& sel, dist::CommWorld* world,
                         const loom_ops_v2* ops, GemmNumerics numerics)
    : world_(world), ops_(ops) {
  const int tp = world ? world->mesh().tp : 1;
  const plugins::SlotChoice* seq = sel.slot("sequence");  // without tp: layout_problem refused it
  if (tp == 1) {
    api_ = std::make_unique<LayerApi>(ops, numerics);
    start_experts(sel, mc.moe.experts);
    start_context(sel, mc.seq_len);
    return;
  }
  const plugins::SlotChoice* tensor = sel.slot("tensor");
  if (!tensor) throw RuntimeError("tp > 1 without a tensor plugin got past layout_problem");
  loom_options topts = tensor->options;
  tensor_ = std::make_unique<plugins::Instance>(tensor->found, &topts);
  if (seq) {
    loom_options sopts = seq->options;
    sequence_ = std::make_unique<plugins::Instance>(seq->found, &sopts);
  }
  loom_tensor_context ctx{};
  ctx.v = LOOM_VERSION_OF(loom_tensor_context);
  ctx.comm = world->table();
  ctx.comm_self = world->self();
  ctx.tp = world->axis(dist::Axis::TP).raw();  // PluginLayers gives each plugin its op table
  // A tensor plugin without the options never overlaps: its regions may be its own. "auto"
  // overlaps on CUDA, where NCCL and the NIC move the bytes, and not on CPUs, where gloo's
  // threads would copy them on the cores the GEMMs use (docs/distributed.md, measured).
  PluginLayers::Overlap overlap;
  const char* mode = nullptr;
  int64_t chunks = 1;
  if (plugins::host().opt_str(&topts, "overlap", &mode) == LOOM_OK && mode)
    overlap.on = std::string(mode) == "on" || (std::string(mode) == "auto" && device == "cuda");
  if (overlap.on && plugins::host().opt_i64(&topts, "overlap_chunks", &chunks) == LOOM_OK)
    overlap.chunks = static_cast<int>(chunks);
  api_ = std::make_unique<PluginLayers>(ops, numerics, ctx, *tensor_, sequence_.get(), overlap);
  start_experts(sel, mc.moe.experts);
  start_context(sel, mc.seq_len);
}

// cp > 1: the context slot splits every sequence over the cp group and runs attention across it.
void TensorSlots::start_context(const plugins::Selection& sel, int64_t seq_len) {
  const int cp = world_ ? world_->mesh().cp : 1;
  const plugins::SlotChoice* slot = sel.slot("context");
  if (cp == 1) return;
  if (!slot) throw RuntimeError("cp > 1 without a context plugin got past layout_problem");
  loom_options opts = slot->options;
  context_plugin_ = std::make_unique<plugins::Instance>(slot->found, &opts);
  loom_context_context ctx{};
  ctx.v = LOOM_VERSION_OF(loom_context_context);
  ctx.comm = world_->table();
  ctx.comm_self = world_->self();
  ctx.cp = world_->axis(dist::Axis::CP).raw();
  ctx.ops = plugins::ops_for(context_plugin_->desc(), ops_);
  ctx.device = ops_->device;
  context_ = std::make_unique<ContextAttention>(ctx, *context_plugin_, seq_len);
  api_->set_context(context_.get());
}

// ep > 1: the expert slot places each MoE layer's experts over the ep group.
// experts > 0: layout_problem checked.
void TensorSlots::start_experts(const plugins::Selection& sel, int64_t experts) {
  const int ep = world_ ? world_->mesh().ep : 1;
  if (ep == 1) return;
  const plugins::SlotChoice* slot = sel.slot("expert");
  if (!slot) throw RuntimeError("ep > 1 without an expert plugin got past layout_problem");
  loom_options opts = slot->options;
  expert_ = std::make_unique<plugins::Instance>(slot->found, &opts);
  loom_expert_context ctx{};
  ctx.v = LOOM_VERSION_OF(loom_expert_context);
  ctx.comm = world_->table();
  ctx.comm_self = world_->self();
  ctx.ep = world_->axis(dist::Axis::EP).raw();
  ctx.experts = static_cast<int32_t>(experts);
  dispatch_ = std::make_unique<ExpertDispatch>(ctx, *expert_);
  api_->set_experts(dispatch_.get());
}

TensorSlots::~TensorSlots() {
  api_.reset();
  context_.reset();
  context_plugin_.reset();
  dispatch_.reset();
  expert_.reset();
  sequence_.reset();
  tensor_.reset();
}

// Every tensor's sum of squares in one call (one host wait on a device), then summed in
// parameter order, as one sum_squares per tensor would.
double TensorSlots::global_norm(ParamStore& params, Tensor Param::*which) {
  std::vector<const Param*> counted;
  std::vector<const float*> x;
  std::vector<int64_t> n;
  for (const Param& p : params.all()) {
    if (p.mirror) continue;  // the owner's copy counts
    counted.push_back(&p);
    x.push_back((p.*which).f32());
    n.push_back((p.*which).numel());
  }
  std::vector<double> ss(counted.size(), 0.0);
  if (LOOM_HAS_FIELD(ops_, loom_ops_v2, sum_squares_multi))
    ops_->sum_squares_multi(static_cast<int64_t>(x.size()), x.data(), n.data(), ss.data());
  else
    for (size_t i = 0; i < x.size(); ++i) ss[i] = ops_->sum_squares(x[i], n[i]);
  double replicated = 0, sharded = 0, experts = 0;
  for (size_t i = 0; i < counted.size(); ++i)
    (counted[i]->tp_sharded() ? sharded : counted[i]->ep_sharded() ? experts : replicated) += ss[i];
  return norm_of({replicated + over_ep(experts), sharded});
}

// Each ep rank holds different experts (and the same everything else).
double TensorSlots::over_ep(double sum) {
  if (world_ && world_->mesh().ep > 1)
    world_->axis(dist::Axis::EP).all_reduce(flat_view(&sum, LOOM_F64, 1), LOOM_REDUCE_SUM);
  return sum;
}

double TensorSlots::norm_of(std::pair<double, double> sums) {
  auto [replicated, sharded] = sums;
  if (world_ && world_->mesh().tp > 1)
    world_->axis(dist::Axis::TP).all_reduce(flat_view(&sharded, LOOM_F64, 1), LOOM_REDUCE_SUM);
  double total = replicated + sharded;
  if (world_ && world_->mesh().pp > 1)  // each stage holds different layers
    world_->axis(dist::Axis::PP).all_reduce(flat_view(&total, LOOM_F64, 1), LOOM_REDUCE_SUM);
  return std::sqrt(total);
}

std::string layer_of(const std::string& param) {
  const size_t dot = param.find('.');
  if (param.size() > 1 && param[0] == 'h' && std::isdigit(static_cast<unsigned char>(param[1])))
    return param.substr(0, dot);  // a transformer block: "h3"
  if (param == "wte" || param == "wpe") return "embedding";
  return "head";
}

std::vector<std::pair<std::string, double>> TensorSlots::layer_grad_norms(ParamStore& params) {
  std::vector<std::string> names;
  std::vector<double> sharded, replicated, experts;
  for (const Param& p : params.all()) {
    if (p.mirror) continue;
    const std::string layer = layer_of(p.name);
    if (names.empty() || names.back() != layer) {
      names.push_back(layer);
      sharded.push_back(0);
      replicated.push_back(0);
      experts.push_back(0);
    }
    (p.tp_sharded()   ? sharded
     : p.ep_sharded() ? experts
                      : replicated)
        .back() += ops_->sum_squares(p.grad.f32(), p.grad.numel());
  }
  if (world_ && world_->mesh().tp > 1)
    world_->axis(dist::Axis::TP)
        .all_reduce(flat_view(sharded.data(), LOOM_F64, sharded.size()), LOOM_REDUCE_SUM);
  if (world_ && world_->mesh().ep > 1)
    world_->axis(dist::Axis::EP)
        .all_reduce(flat_view(experts.data(), LOOM_F64, experts.size()), LOOM_REDUCE_SUM);
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < names.size(); ++i)
    out.push_back({names[i], std::sqrt(sharded[i] + replicated[i] + experts[i])});
  return out;
}

}  // namespace loom::train

namespace loom::train {

void TensorSlots::check_replicated(const ParamStore& params) {
  if (!world_ || world_->mesh().tp == 1) return;
  dist::Communicator& tp = world_->axis(dist::Axis::TP);
  for (const Param& p : params.all()) {
    if (p.tp_sharded()) continue;
    double sum = 0;
    const std::vector<float> v = to_host(p.value);
    for (int64_t i = 0; i < p.value.numel(); ++i) sum += static_cast<double>(v[i]) * (i % 7 + 1);
    double lo = sum, hi = sum;
    tp.all_reduce(flat_view(&lo, LOOM_F64, 1), LOOM_REDUCE_MIN);
    tp.all_reduce(flat_view(&hi, LOOM_F64, 1), LOOM_REDUCE_MAX);
    if (lo != hi)
      throw RuntimeError("replicated parameter '" + p.name +
                         "' differs between tp ranks (checksums " + std::to_string(lo) + " .. " +
                         std::to_string(hi) + ")");
  }
}

}  // namespace loom::train
