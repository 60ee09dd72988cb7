#include "train/optimizer.hpp"

namespace loom::train {

Optimizer::Optimizer(ParamStore& params, TensorSlots& slots, DataParallel* dp,
                     const loom_ops_v2* ops, AdamW hp)
    : params_(params), slots_(slots), dp_(dp), ops_(ops), hp_(hp) {
  TensorPurpose purpose("AdamW's moments (m, v)");
  if (!sharded()) m_ = Tensor::zeros({params.numel()}), v_ = Tensor::zeros({params.numel()});
}

double Optimizer::grad_norm() {
  return sharded() ? slots_.norm_of(dp_->sum_squares(0)) : slots_.grad_norm(params_);
}

double Optimizer::param_norm() {
  return sharded() ? slots_.norm_of(dp_->sum_squares(1)) : slots_.param_norm(params_);
}

std::vector<std::pair<std::string, double>> Optimizer::layer_grad_norms(double carried_scale) {
  if (sharded()) return {};
  auto norms = slots_.layer_grad_norms(params_);
  for (auto& n : norms) n.second /= carried_scale;
  return norms;
}

void Optimizer::apply(double lr, double grad_norm, double carried_scale) {
  double factor = 1.0 / carried_scale;
  if (hp_.grad_clip > 0 && grad_norm > hp_.grad_clip) factor *= hp_.grad_clip / grad_norm;
  ++applied_;
  if (sharded())
    return dp_->step({lr, hp_.beta1, hp_.beta2, hp_.eps, hp_.weight_decay, factor, applied_});
  if (factor != 1.0) ops_->scale(params_.grads(), static_cast<float>(factor), params_.numel());
  // Every tensor in one call (one launch on a GPU).
  std::vector<float*> value, m, v;
  std::vector<const float*> grad;
  std::vector<int64_t> numel;
  std::vector<float> decay;
  for (Param& p : params_.all()) {
    value.push_back(p.value.f32()), grad.push_back(p.grad.f32());
    m.push_back(m_.f32() + p.offset), v.push_back(v_.f32() + p.offset);
    numel.push_back(p.value.numel()), decay.push_back(p.weight_decay ? hp_.weight_decay : 0.f);
  }
  ops_->adamw_multi(static_cast<int64_t>(value.size()), value.data(), grad.data(), m.data(),
                    v.data(), numel.data(), decay.data(), static_cast<float>(lr), hp_.beta1,
                    hp_.beta2, hp_.eps, applied_);
}

void Optimizer::after_update(bool updated) {
  if (dp_ && !sharded()) dp_->after_update(updated, m_.f32(), v_.f32(), params_.numel());
}

std::vector<int64_t> Optimizer::accounting() {
  std::vector<int64_t> acct = dp_ ? dp_->accounting() : std::vector<int64_t>(5, 0);
  if (!sharded()) acct[0] = acct[1] = 4 * params_.numel(), acct[2] = 8 * params_.numel();
  return acct;
}

void Optimizer::check_replicas(const std::string& when) {
  if (dp_) dp_->check_identical(params_, when);
}

void Optimizer::check_tp_replicas() {
  if (!sharded()) slots_.check_replicated(params_);
}

void Optimizer::perturb_replica(float delta) {
  if (sharded()) return dp_->nudge_replica(delta);
  params_.values()[0] += delta;
}

ckpt::TrainingState Optimizer::checkpoint_state() {
  ckpt::TrainingState state;
  state.params = &params_, state.m = &m_, state.v = &v_, state.applied = &applied_;
  if (sharded())
    state.shards = {[this] { return dp_->shard_pieces(); }, [this] { dp_->pieces_loaded(); }};
  if (dp_ && dp_->has_state())
    state.plugin = {dp_->name(), [this] { return dp_->save_state(); },
                    [this](const std::string& s) { dp_->load_state(s); }};
  return state;
}

}  // namespace loom::train
