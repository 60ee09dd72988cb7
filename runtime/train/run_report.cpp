// What a run reports after each step: the metrics line (common fields, then each slot's own),
// validation and text samples when due, the console line, and the run's end.
#include <algorithm>
#include <cstdio>

#include "core/json.hpp"
#include "loader/services.hpp"
#include "ops/ops.hpp"
#include "parallel/context_attention.hpp"
#include "parallel/layer_api.hpp"
#include "train/context_positions.hpp"
#include "train/report_fields.hpp"
#include "train/run.hpp"
#include "train/sample.hpp"

namespace loom::train {

namespace {

// This rank's sum of validation token losses over `batches` fixed windows of T local positions.
double validation_loss_sum(model::Model& model, const BatchFn& batch, int64_t batches,
                           int64_t micro, int64_t T, std::vector<int32_t>& tok,
                           std::vector<int32_t>& tgt) {
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    batch(static_cast<int>(b), tok.data(), tgt.data());
    sum += model.forward({tok.data(), tgt.data(), micro, T, 0.f});
  }
  return sum;
}

// Block 0's segments per micro-batch, averaged over the run (first step included).
void print_profile(const SegmentProfile& p, int64_t microbatches) {
  double total = 0;
  for (const auto& r : p.rows()) total += r.ms;
  std::printf("block0 profile, per micro-batch (averaged over %lld):\n", (long long)microbatches);
  std::printf("  %-20s %10s %7s %12s %14s\n", "segment", "ms", "share", "collectives",
              "bytes moved");
  for (const auto& r : p.rows())
    std::printf("  %-20s %10.3f %6.1f%% %12.1f %14.0f\n", r.name.c_str(), r.ms / microbatches,
                100 * r.ms / total, double(r.collectives) / microbatches,
                double(r.bytes) / microbatches);
  std::printf("  %-20s %10.3f\n", "total", total / microbatches);
}

}  // namespace

void Run::report(int64_t step, const StepResult& r, double step_s, const PipeStepStats& pipe_stats,
                 TrainSummary& sum) {
  Fields fields = common_fields(step, r, step_s, pipe_stats);
  for (auto& add : reporters_) add(fields);
  std::string val_text;
  evaluate_and_sample(step, fields, val_text, sum);
  if (step == first_step_) sum.first_loss = r.loss;
  sum.final_loss = r.loss;
  sum.last_step = step;
  sum.skipped_steps = skipped_steps_;
  sum.step_ms.push_back(step_s * 1e3);
  sum.exposed_comm_ms.push_back(value_of(fields, "exposed_comm_ms"));
  if (!lead_) return;
  const std::string eta = eta_text(step);
  if (step % s_.log_every == 0 || step == last_step_ || !val_text.empty())
    std::printf(
        "step %5lld/%lld | loss %.4f%s | grad %.3f | lr %.2e | %s tok/s | mfu %.1f%% | %.0f ms | "
        "mem %.0f MiB%s\n",
        (long long)step, (long long)s_.steps, r.loss, val_text.c_str(), r.grad_norm, r.lr,
        human_count(value_of(fields, "tokens_per_s")).c_str(), value_of(fields, "mfu") * 100,
        step_s * 1e3, value_of(fields, "mem_bytes") / 1048576.0, eta.c_str());
  std::fflush(stdout);
}

// The ETA from the first step's report: the steps left at the mean wall time per step so far.
std::string Run::eta_text(int64_t step) {
  const auto now = std::chrono::steady_clock::now();
  if (step == first_step_) first_report_ = now;
  return eta_suffix(std::chrono::duration<double>(now - first_report_).count(), step - first_step_,
                    last_step_ - step);
}

// Every run's fields; the slots' own follow (runtime/train/report_fields.hpp).
Fields Run::common_fields(int64_t step, const StepResult& r, double step_s,
                          const PipeStepStats& pipe_stats) {
  const double tps = static_cast<double>(s_.global_batch * T_) / step_s;
  const Memory mem = process_memory();
  Fields f = {{"step", double(step)},
              {"loss", r.loss},
              {"grad_norm", r.grad_norm},
              {"lr", r.lr},
              {"tokens_per_s", tps},
              {"mfu", tps * flops_per_token_ / (peak_.gflops * 1e9 * env_.world)},
              {"step_ms", step_s * 1e3},
              {"mem_bytes", double(mem.rss_bytes)},
              {"peak_mem_bytes", double(mem.peak_bytes)},
              {"device_peak_bytes", double(ops::device_peak_bytes(device_))},
              {"host_waits", double(r.host_waits)},
              {"host_read_bytes", double(r.host_read_bytes)},
              {"activation_bytes", double(activation_bytes_)},
              {"param_norm", optimizer_->param_norm()},
              {"skipped", r.skipped ? 1.0 : 0.0},
              {"skipped_steps", double(skipped_steps_)},
              {"threads", double(threads_)}};
  add_comm_metrics(f, r.traffic, r.comm_ms, r.exposed_ms);
  if (pipe_) add_pipeline_metrics(f, pipe_stats);
  for (const auto& [source, tokens] : data_->tokens_by_source(step))
    f.push_back({"tokens." + source, double(tokens)});
  return f;
}

// Every rank evaluates and samples (tensor-parallel layers talk inside forward); rank 0 writes.
void Run::evaluate_and_sample(int64_t step, Fields& fields, std::string& val_text,
                              TrainSummary& sum) {
  evaluating(true);
  if (s_.eval_every > 0 && (step % s_.eval_every == 0 || step == s_.steps || step == 1)) {
    const double val = validation_loss();
    fields.push_back({"val_loss", val});
    char b[48];
    std::snprintf(b, sizeof b, " | val %.4f", val);
    if (lead_) val_text = b;
    if (sum.first_val_loss < 0) sum.first_val_loss = val;
    sum.final_val_loss = val;
    ++sum.evaluations;
  }
  if (lead_) log_->write(fields);
  if (s_.sample_every > 0 && (step % s_.sample_every == 0 || step == s_.steps)) {
    ContextAttention* cp = slots_->context();
    LayerApi& api = slots_->api();
    api.set_context(nullptr);  // a sample runs on every cp rank whole, through its KV cache
    const NextLogits through_stages = pipe_ ? NextLogits([this](const std::vector<int32_t>& ctx) {
      return pipe_->next_logits(ctx);
    })
                                            : NextLogits{};
    const std::string text =
        generate(*model_, tokenizer_.get(), s_.sample_prompt,
                 {s_.sample_tokens, 1.0, s_.sample_top_k, 1.0, s_.seed + step}, through_stages);
    api.set_context(cp);
    if (lead_)
      std::printf("---- sample at step %lld ----\n%s%s\n----\n", (long long)step,
                  printable(s_.sample_prompt).c_str(), printable(text).c_str());
  }
  evaluating(false);
}

// Mean validation loss per token over the fixed windows, on every rank: the same
// eval_batches x global_batch windows under every layout, micro_batch at a time, each rank all
// of them, so the validation loss does not depend on the layout.
double Run::validation_loss() {
  ContextAttention* cp = slots_->context();
  BatchFn val_batch =
      local_positions(cp, s_.micro_batch, [this](int b, int32_t* tokens, int32_t* targets) {
        data_->val_batch(b * s_.micro_batch, s_.micro_batch, tokens, targets);
      });
  const int64_t chunks = s_.eval_batches * s_.global_batch / s_.micro_batch;
  double val =
      pipe_ ? pipe_->evaluate(val_batch, static_cast<int>(chunks), s_.micro_batch, T_local_)
            : validation_loss_sum(*model_, val_batch, chunks, s_.micro_batch, T_local_, tok_, tgt_);
  if (cp) world_->axis(dist::Axis::CP).all_reduce(flat_view(&val, LOOM_F64, 1), LOOM_REDUCE_SUM);
  if (cp) cp->stats();  // evaluation's attention is not a step's
  return val / static_cast<double>(chunks * s_.micro_batch * T_);
}

// Evaluation and samples route MoE tokens dropless, so the result does not depend on how many
// sequences a layout puts in a micro-batch, and stay out of the per-layer profile.
void Run::evaluating(bool on) {
  plugins::set_training(!on);
  for (auto& [name, routed] : model_->routed_layers()) routed->use_capacity(!on);
  slots_->api().profile().paused = on;  // [run] profile_layer counts training steps only
}

// The checks at the end of a run, every rank's peak memory (for `loom compare`), and the
// run's throughput.
void Run::finish_run(TrainSummary& sum, double total_time) {
  checkpoints_->close();
  if (model_ && job_.run.profile_layer && lead_)
    print_profile(slots_->api().profile(), s_.steps * s_.accum);
  optimizer_->check_tp_replicas();  // norms and row-parallel biases stayed identical across tp
  if (replica_checks() && dp_ && dp_->replicas_synced(current_step_))  // the same updates
    optimizer_->check_replicas("at the end of the run");
  double peak_mem = static_cast<double>(process_memory().peak_bytes);
  std::vector<double> peaks(env_.world, peak_mem);
  if (world_)
    world_->world().all_gather(flat_view(&peak_mem, LOOM_F64, 1),
                               flat_view(peaks.data(), LOOM_F64, env_.world));
  sum.peak_mem_bytes = *std::max_element(peaks.begin(), peaks.end());
  if (lead_) {
    std::string ranks = "{\"peak_mem_bytes\": [";
    for (int r = 0; r < env_.world; ++r)
      ranks += (r ? ", " : "") + std::to_string(static_cast<int64_t>(peaks[r]));
    write_checked(run_dir_ / "ranks.json", ranks + "]}\n");
  }
  if (trace_) trace_->write();            // a full disk fails the run here, naming the file
  if (world_) world_->world().barrier();  // rank 0 hosts the store: leave together
  sum.first_step = first_step_;
  sum.steps = sum.last_step - first_step_ + 1;  // this run's, after a resume, an exit or a signal
  const double tokens = static_cast<double>(sum.steps * s_.global_batch * T_);
  sum.tokens_per_s = tokens / total_time;
  sum.mfu = sum.tokens_per_s * flops_per_token_ / (peak_.gflops * 1e9 * env_.world);
}

}  // namespace loom::train
