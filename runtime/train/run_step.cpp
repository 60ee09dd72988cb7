#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "ckpt/checkpoint_settings.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "loader/services.hpp"
#include "ops/ops.hpp"
#include "parallel/context_attention.hpp"
#include "train/context_positions.hpp"
#include "train/layout_rules.hpp"
#include "train/report_fields.hpp"
#include "train/run.hpp"
#include "train/sample.hpp"
#include "train/stop_signal.hpp"

namespace fs = std::filesystem;

namespace loom::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

// Validation before the first update (as llm.c does), then the steps, each followed by the
// checkpoint, its metrics line, and evaluation and samples when due.
TrainSummary Run::train() {
  TrainSummary sum;
  if (first_step_ > last_step_) {
    if (lead_)
      std::printf(
          "nothing to do: the checkpoint has step %lld done and the run ends at step %lld ([train] "
          "steps%s)\n",
          (long long)(first_step_ - 1), (long long)last_step_,
          s_.exit_after > 0 ? " or exit_after" : "");
    if (world_) world_->world().barrier();
    return sum;
  }
  if (s_.eval_every > 0 && first_step_ == 1) {
    evaluating(true);
    const double val = validation_loss();
    evaluating(false);
    if (lead_)
      std::printf("step %5d/%lld | val %.4f (before the first update)\n", 0, (long long)s_.steps,
                  val);
    if (lead_) log_->write({{"step", 0.0}, {"val_loss", val}});
  }
  StopSignal stop_signal;
  const bool save_on_signal = job_.checkpoint.save_on_signal && checkpoints_->enabled();
  double total_time = 0;
  for (int64_t step = first_step_; step <= last_step_; ++step) {
    const Clock::time_point t0 = Clock::now();
    dist::take_traffic();  // the last report's (norms, evaluation, samples) is not this step's
    PipeStepStats pipe_stats;
    StepResult r = step_once(step, pipe_stats);
    const bool stopping = stop_signal.agreed(world_.get());
    // Stopping makes this step the last one, which always saves.
    const bool saved =
        checkpoints_->after_step(step, stopping && save_on_signal ? step : last_step_);
    if (saved) sum.last_saved_step = step;
    faults_->step_end(seconds_since(t0));
    const double step_s = seconds_since(t0);
    r.traffic =
        dist::take_traffic();  // what the report then sends (norms, evaluation) is not the step's
    total_time += step_s;
    report(step, r, step_s, pipe_stats, sum);
    threads_ = thread_policy_->after_step();
    if (stopping) {
      sum.stopped_by = stop_signal.name();
      sum.saved_on_stop = saved;  // on the signal, or because this step was due anyway
      break;
    }
  }
  finish_run(sum, total_time);
  return sum;
}

// One step, as named parts: forward and backward over the micro-batches, the gradients reduced,
// the step judged (overflow, non-finite, spike), the update, and the checks after it.
//   The loss gradient carries a scale (carried_scale): the precision's loss scale over the data
//   group's size, so that every rank's gradients (and every GEMM operand a narrow format casts)
//   are the single-rank run's, whatever the layout; the data slot's average divides the size back.
//   The gradients are divided by it; the ABI's grad_scale (loom_adamw) is its inverse, a
//   factor the gradients are multiplied by.
Run::StepResult Run::step_once(int64_t step, PipeStepStats& pipe_stats) {
  const Clock::time_point t0 = Clock::now();
  current_step_ = step;
  plugins::set_step(step);
  const int64_t waits0 = ops::device_host_waits(device_),
                reads0 = ops::device_host_read_bytes(device_);
  StepResult r;
  r.lr = s_.lr.at(step);
  params_.zero_grads();
  for (auto& [name, routed] : model_->routed_layers()) routed->reset_stats();
  const double loss_scale = precision_ ? precision_->loss_scale() : 1.0;
  const double data_ranks = static_cast<double>(mesh_.data_ranks());
  const double carried_scale = loss_scale / data_ranks;
  const float dloss =
      faults_->loss_gradient(step, static_cast<float>(carried_scale / (local_batch_ * T_local_)));
  if (!peak_marked_) {  // activation_peak_bytes counts from here
    ops::mark_device_peak(device_);
    peak_marked_ = true;
  }
  optimizer_->before_forward();
  r.loss = forward_backward(step, dloss, pipe_stats) / static_cast<double>(local_batch_ * T_local_);
  reduce_gradients(r);
  r.grad_norm = optimizer_->grad_norm() / carried_scale;
  r.skipped = judge(step, r, carried_scale);
  if (r.skipped)
    ++skipped_steps_;
  else
    optimizer_->apply(r.lr, r.grad_norm, carried_scale);
  optimizer_->after_update(!r.skipped);
  if (trace_) trace_->span("step " + std::to_string(step), "step", t0, Clock::now());
  faults_->after_update(step, *optimizer_);
  stability_->check(step, params_);
  r.host_waits = ops::device_host_waits(device_) - waits0;
  r.host_read_bytes = ops::device_host_read_bytes(device_) - reads0;
  return r;
}

// Gradients that a rank has finished go through one named point before any reduction: the
// tensor slot's sum over tp for the rows it split, then the [faults] that strike there.
void Run::on_grads_final(const std::vector<Param*>& params) {
  slots_->api().finish_replicated_grads(params);
  faults_->gradients_final(current_step_, params);
}

// The step's micro-batches, whole-model or through this rank's pipeline stage; the data slot
// hears during the last backward which layers' gradients are final. Returns the loss sum.
double Run::forward_backward(int64_t step, float dloss, PipeStepStats& pipe_stats) {
  BatchFn batch = train_batches(step);
  auto grad_ready = [this](size_t layer) {
    if (dp_) dp_->after_layer(layer);
  };
  if (pipe_)
    return pipe_->train_step(batch, s_.micro_batch, T_local_, dloss, grad_ready, trace_.get(),
                             pipe_stats);
  double loss_sum = 0;
  for (int64_t a = 0; a < s_.accum; ++a) {
    batch(static_cast<int>(a), tok_.data(), tgt_.data());
    plugins::set_micro_batch(static_cast<int32_t>(a));
    model::Microbatch mb{tok_.data(), tgt_.data(), s_.micro_batch, T_local_, dloss};
    const Clock::time_point f0 = Clock::now();
    loss_sum += model_->forward(mb);
    const Clock::time_point b0 = Clock::now();
    model_->backward(mb, a + 1 == s_.accum ? std::function<void(size_t)>(grad_ready) : nullptr);
    if (trace_) {
      trace_->span("F" + std::to_string(a), "forward", f0, b0);
      trace_->span("B" + std::to_string(a), "backward", b0, Clock::now());
    }
  }
  plugins::set_micro_batch(-1);
  return loss_sum;
}

// This rank's micro-batches of the step: its samples of the global batch, cut to the positions
// it holds under cp.
BatchFn Run::train_batches(int64_t step) {
  return local_positions(slots_->context(), s_.micro_batch,
                         [this, step](int a, int32_t* tokens, int32_t* targets) {
                           const int64_t first = first_sample_ + a * s_.micro_batch;
                           data_->train_batch(step, first, s_.micro_batch, tokens, targets);
                           for (int64_t g = first; data_trace_ && g < first + s_.micro_batch; ++g) {
                             const auto [source, offset] = data_->train_window(step, g);
                             std::fprintf(data_trace_.get(), "%lld\t%lld\t%d\t%lld\n",
                                          (long long)step, (long long)g, source, (long long)offset);
                           }
                           faults_->read_batch(step, targets, s_.micro_batch * T_);
                         });
}

// The data slot finishes its reductions, the pipeline sums the tied embedding between its two
// stages, and the tensor slot sums over tp the gradients of rows it split (under ZeRO each
// unit's were summed before the plugin reduced them).
void Run::reduce_gradients(StepResult& r) {
  const Clock::time_point r0 = Clock::now();
  if (dp_) {
    std::tie(r.comm_ms, r.exposed_ms) = dp_->finish();
    r.loss = dp_->mean_over_data(r.loss);
  }
  if (pipe_) pipe_->sync_tied(params_, dp_.get());
  if (trace_) trace_->span("gradient reduction", "comm", r0, Clock::now());
  if (!optimizer_->sharded()) {
    std::vector<Param*> all;
    for (Param& p : params_.all()) all.push_back(&p);
    on_grads_final(all);
  }
}

// Whether to skip the update: the precision slot's verdict (an fp16 overflow on any rank), a
// non-finite loss or gradient norm, or a spike the stability watch skips.
// A data plugin whose replicas diverge (local SGD) leaves each rank its own gradient norm, so
// the verdicts are agreed over the world: every rank takes the same branch (a non-finite step's
// report is a collective) and skips the same updates (AdamW's step count).
bool Run::judge(int64_t step, StepResult& r, double carried_scale) {
  const bool apart = dp_ && dp_->diverges();
  bool found_inf = !std::isfinite(r.grad_norm) || !std::isfinite(r.loss);
  if (apart) found_inf = world_->world().any(found_inf);
  const bool overflow =
      precision_ &&
      precision_->end_step(
          found_inf, [this](float* v, int64_t n) { reduce_over_sharers(v, n); },
          [this](float* v, int64_t n) {  // the sharers are the world unless pp > 1
            if (mesh_.pp > 1)
              world_->axis(dist::Axis::PP).all_reduce(flat_view(v, LOOM_F32, n), LOOM_REDUCE_MAX);
          });
  if (overflow) {
    if (lead_)
      std::printf(
          "step %lld: gradients overflowed on some rank; update skipped on every rank (loss scale "
          "now %g)\n",
          (long long)step, precision_->loss_scale());
    stability_->log({step,
                     "numeric",
                     "overflow_skip",
                     {{"loss_scale", json_number(precision_->loss_scale())}}});
    return true;
  }
  if (found_inf)
    return stability_->on_nonfinite(step, r.loss, r.grad_norm, params_, !optimizer_->sharded());
  std::vector<std::string> sources;  // a blend's, so an offset names a place in one directory
  for (int64_t i = 0; i < s_.global_batch; ++i) {
    const auto [source, offset] = data_->train_window(step, i);
    offsets_[i] = offset;
    if (data_->sources() > 1) sources.push_back(data_->source_name(source));
  }
  const bool spike = stability_->on_step(step, r.loss, r.grad_norm, offsets_, sources, [&] {
    return optimizer_->layer_grad_norms(carried_scale);
  });
  return apart ? world_->world().any(spike) : spike;
}

// The ranks of one pipeline stage name the same GEMM operands: tp, then the data group.
void Run::reduce_over_sharers(float* v, int64_t n) {
  if (!world_) return;
  if (mesh_.tp > 1)
    world_->axis(dist::Axis::TP).all_reduce(flat_view(v, LOOM_F32, n), LOOM_REDUCE_MAX);
  if (mesh_.data_ranks() > 1) world_->data().all_reduce(flat_view(v, LOOM_F32, n), LOOM_REDUCE_MAX);
}

}  // namespace loom::train
