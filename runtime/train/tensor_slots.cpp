#include "train/tensor_slots.hpp"

#include <cctype>
#include <cmath>

#include "core/errors.hpp"
#include "parallel/plugin_layers.hpp"

namespace loom::train {

TensorSlots::TensorSlots(const config::Config& cfg, const plugins::Selection& sel,
                         dist::CommWorld* world, const loom_ops* ops, GemmNumerics numerics)
    : world_(world), ops_(ops) {
  const int tp = world ? world->mesh().tp : 1;
  const plugins::SlotChoice* seq = sel.slot("sequence");
  if (seq && tp == 1)
    throw ConfigError("[plugins] sequence = \"" + std::string(seq->found.desc->name) +
                      "\" needs [parallel] tp > 1: sequence parallelism splits rows over the tp group");
  if (tp == 1) {
    api_ = std::make_unique<LayerApi>(ops, numerics);
    return;
  }
  const plugins::SlotChoice* tensor = sel.slot("tensor");
  if (!tensor) throw ConfigError("[parallel] tp = " + std::to_string(tp) + " needs [plugins] tensor (e.g. \"tp\")");
  loom_options topts = plugins::options_for(cfg, tensor->found.desc->name);
  tensor_ = std::make_unique<plugins::Instance>(tensor->found, &topts);
  if (seq) {
    loom_options sopts = plugins::options_for(cfg, seq->found.desc->name);
    sequence_ = std::make_unique<plugins::Instance>(seq->found, &sopts);
  }
  loom_tensor_context ctx{};
  ctx.v = LOOM_VERSION_OF(loom_tensor_context);
  ctx.comm = world->table();
  ctx.comm_self = world->self();
  ctx.tp = world->axis(dist::Axis::TP).raw();
  ctx.ops = ops;
  api_ = std::make_unique<PluginLayers>(ops, numerics, ctx, *tensor_, sequence_.get());
}

TensorSlots::~TensorSlots() {
  api_.reset();
  sequence_.reset();
  tensor_.reset();
}

double TensorSlots::global_norm(ParamStore& params, Tensor Param::*which) {
  double replicated = 0, sharded = 0;
  for (const Param& p : params.all()) {
    if (p.mirror) continue;  // the owner's copy counts
    const Tensor& t = p.*which;
    double ss = ops_->sum_squares(t.f32(), t.numel());
    (p.slice.length >= 0 ? sharded : replicated) += ss;
  }
  return norm_of({replicated, sharded});
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
  std::vector<double> sharded, replicated;
  for (const Param& p : params.all()) {
    if (p.mirror) continue;
    const std::string layer = layer_of(p.name);
    if (names.empty() || names.back() != layer) {
      names.push_back(layer);
      sharded.push_back(0);
      replicated.push_back(0);
    }
    (p.slice.length >= 0 ? sharded : replicated).back() += ops_->sum_squares(p.grad.f32(), p.grad.numel());
  }
  if (world_ && world_->mesh().tp > 1)
    world_->axis(dist::Axis::TP).all_reduce(flat_view(sharded.data(), LOOM_F64, sharded.size()), LOOM_REDUCE_SUM);
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], std::sqrt(sharded[i] + replicated[i])});
  return out;
}

}  // namespace loom::train

namespace loom::train {

void TensorSlots::check_replicated(const ParamStore& params) {
  if (!world_ || world_->mesh().tp == 1) return;
  dist::Communicator& tp = world_->axis(dist::Axis::TP);
  for (const Param& p : params.all()) {
    if (p.slice.length >= 0) continue;
    double sum = 0;
    const float* v = p.value.f32();
    for (int64_t i = 0; i < p.value.numel(); ++i) sum += static_cast<double>(v[i]) * (i % 7 + 1);
    double lo = sum, hi = sum;
    tp.all_reduce(flat_view(&lo, LOOM_F64, 1), LOOM_REDUCE_MIN);
    tp.all_reduce(flat_view(&hi, LOOM_F64, 1), LOOM_REDUCE_MAX);
    if (lo != hi)
      throw RuntimeError("replicated parameter '" + p.name + "' differs between tp ranks (checksums " +
                         std::to_string(lo) + " .. " + std::to_string(hi) + ")");
  }
}

}  // namespace loom::train
