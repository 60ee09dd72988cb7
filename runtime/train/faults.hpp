// [faults]: what a test may break on purpose, and when. Each fault applies at one named point of
// a step, so the step itself reads without them:
//   read_batch        bad_batch_step     the batch's targets scrambled (a spike to catch)
//   loss_gradient     inf_loss_*         an infinite loss gradient on one rank (fp16 skips)
//   gradients_final   nan_grad_*         a NaN in one parameter's gradient: after the data slot's
//                                        reduction (ddp), or before a ZeRO plugin reduce-scatters
//                                        it
//   after_update      perturb_*          one rank's parameters nudged off their replicas
//   step_end          slow_step          every step sleeps a share of its own time
// (ckpt_write_error_step is the checkpointer's: a writer failure at that step's save.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/params.hpp"
#include "train/settings.hpp"

namespace loom::train {

class Optimizer;

class FaultInjector {
 public:
  // Checks that nan_grad_param names a parameter this rank holds.
  FaultInjector(const Faults& faults, int rank, int64_t vocab, const ParamStore& params);
  const Faults& faults() const { return f_; }

  void read_batch(int64_t step, int32_t* targets, int64_t n) const;
  float loss_gradient(int64_t step, float dloss) const;
  // `ready`: parameters whose gradient this rank has finished for the step's last micro-batch
  // (ddp, or no data slot) or for one micro-batch (ZeRO, which reduces per micro-batch).
  void gradients_final(int64_t step, const std::vector<Param*>& ready) const;
  void after_update(int64_t step, Optimizer& optimizer) const;
  void step_end(double step_seconds) const;

 private:
  Faults f_;
  int rank_;
  int64_t vocab_;
};

}  // namespace loom::train
