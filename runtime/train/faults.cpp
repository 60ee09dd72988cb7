#include "train/faults.hpp"

#include <chrono>
#include <cmath>
#include <thread>

#include "core/errors.hpp"
#include "core/nearest.hpp"
#include "train/optimizer.hpp"

namespace loom::train {

FaultInjector::FaultInjector(const Faults& faults, int rank, int64_t vocab,
                             const ParamStore& params)
    : f_(faults), rank_(rank), vocab_(vocab) {
  if (f_.nan_grad_step <= 0) return;
  std::vector<std::string> names;
  for (const Param& p : params.all()) {
    if (p.name == f_.nan_grad_param) return;
    names.push_back(p.name);
  }
  throw ConfigError("[faults] nan_grad_param = \"" + f_.nan_grad_param +
                    "\" is not a parameter of this model" + did_you_mean(f_.nan_grad_param, names));
}

void FaultInjector::read_batch(int64_t step, int32_t* targets, int64_t n) const {
  if (step != f_.bad_batch_step) return;
  for (int64_t i = 0; i < n; ++i) targets[i] = static_cast<int32_t>((targets[i] * 7 + 13) % vocab_);
}

float FaultInjector::loss_gradient(int64_t step, float dloss) const {
  return step == f_.inf_loss_step && rank_ == f_.inf_loss_rank ? INFINITY : dloss;
}

void FaultInjector::gradients_final(int64_t step, const std::vector<Param*>& ready) const {
  if (step != f_.nan_grad_step) return;
  for (Param* p : ready)
    if (p->name == f_.nan_grad_param && p->grad.defined()) p->grad.f32()[0] = NAN;
}

void FaultInjector::after_update(int64_t step, Optimizer& optimizer) const {
  if (step == f_.perturb_step && rank_ == f_.perturb_rank) optimizer.perturb_replica(1e-3f);
}

void FaultInjector::step_end(double step_seconds) const {
  if (f_.slow_step > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(f_.slow_step * step_seconds));
}

}  // namespace loom::train
