#include "train/pipeline.hpp"

#include <chrono>
#include <cstring>

#include "core/errors.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/host.hpp"
#include "loader/services.hpp"
#include "parallel/layer_api.hpp"

namespace loom::train {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

std::vector<double> layer_costs(const model::Config& c) {
  const double C = double(c.d_model), F = double(c.d_ff), T = double(c.seq_len);
  const double fc_out = c.mlp == "swiglu" ? 2 * F : F;
  const double block = 2 * (4 * C * C + fc_out * C + F * C) + 2 * T * C;
  std::vector<double> costs{C};
  for (int i = 0; i < c.n_layer; ++i) costs.push_back(block);
  costs.push_back(2 * C * double(c.padded_vocab(64)));
  return costs;
}

PipelineLayout plan_pipeline(const dist::ParallelSettings& par, const plugins::Selection& sel,
                             const model::Config& mc, int stages, int microbatches) {
  const plugins::SlotChoice* choice = sel.slot("pipeline");
  if (!choice) throw RuntimeError("pp > 1 without a schedule got past layout_problem");
  loom_options opts = choice->options;
  loom_pipeline_shape shape{stages, microbatches, static_cast<int32_t>(par.pp_chunks)};
  PipelineLayout out;
  out.plan = std::make_unique<PipelinePlan>(choice->found, &opts, shape);
  out.kinds = layer_kinds(mc.n_layer);
  out.stage_of = out.plan->partition(out.kinds, layer_costs(mc), par.pp_layout);
  int32_t scatter = 0;  // a schedule without the option sends whole activations
  out.scatter_gather =
      plugins::host().opt_bool(&opts, "scatter_gather", &scatter) == LOOM_OK && scatter;
  return out;
}

std::vector<int> PipelineLayout::layers_of(int rank, int stages) const {
  std::vector<int> layers;
  for (int i = 0; i < static_cast<int>(stage_of.size()); ++i)
    if (stage_of[i] % stages == rank) layers.push_back(i);
  return layers;
}

Pipeline::Pipeline(PipelineLayout layout, dist::CommWorld& world, model::Model& model,
                   int64_t max_rows)
    : pp_(world.axis(dist::Axis::PP)),
      rank_(world.coord().pp),
      stages_(world.mesh().pp),
      plan_(std::move(layout.plan)),
      stage_of_(std::move(layout.stage_of)),
      kinds_(std::move(layout.kinds)),
      model_(&model) {
  // Under sp the activations between stages are already split over tp (local rows).
  dist::Communicator& tp = world.axis(dist::Axis::TP);
  const bool whole_on_tp = model.api().local_rows(max_rows) == max_rows;
  if (layout.scatter_gather && tp.size() > 1 && whole_on_tp) tp_ = &tp;
  const int v = plan_->shape().chunks;
  for (int c = 0; c < v; ++c) {
    Chunk ch;
    ch.stage = plan_->virtual_stage(rank_, c);
    ch.first = model.layer_count();
    for (size_t i = 0; i < model.layer_count(); ++i)
      if (stage_of_[model.layer_number(i)] == ch.stage) {
        ch.first = std::min(ch.first, i);
        ch.last = i + 1;
      }
    chunks_.push_back(ch);
  }
  const int64_t C = model.config().d_model;
  x_ = Tensor::empty({max_rows, C});
  dx_ = Tensor::empty({max_rows, C});
  exchanges_ = plan_->exchanges(rank_);
  eager_receives_ = model.api().ops()->host_reachable != 0;
  const int m = plan_->shape().microbatches;
  slot_of_.assign(static_cast<size_t>(m) * v, -1);
  deferred_of_.assign(static_cast<size_t>(m) * v, -1);
  tokens_.assign(m, std::vector<int32_t>(max_rows));
  targets_.assign(m, std::vector<int32_t>(max_rows));
}

Pipeline::~Pipeline() {
  try {
    finish_sends();
  } catch (...) {  // the job is failing already; the first error is the one reported
  }
}

std::string Pipeline::describe() const {
  const auto& s = plan_->shape();
  std::string out = plan_->name() + ", " + std::to_string(s.stages) + " stages x " +
                    std::to_string(s.chunks) + (s.chunks == 1 ? " chunk" : " chunks") + ", " +
                    std::to_string(s.microbatches) + " micro-batches: ";
  for (size_t i = 0; i < kinds_.size(); ++i) {
    if (i > 0) out += stage_of_[i] != stage_of_[i - 1] ? " | " : " ";
    out += kinds_[i];
  }
  return out;
}

// Unique within a step for every message between two neighbours.
int Pipeline::tag(bool backward, int sender_stage, int mb) const {
  return ((backward ? plan_->virtual_stages() : 0) + sender_stage) * plan_->shape().microbatches +
         mb;
}

// Under scatter/gather this tp rank sends its slice, rows [r n / tp, (r + 1) n / tp).
void Pipeline::post(const Tensor& t, int peer, int tag) {
  const int64_t n = t.shape()[0], rows = wire_rows(n), numel = rows * t.shape()[1];
  const float* from = t.f32() + (sliced(n) ? tp_->rank() * numel : 0);
  const size_t k = pending_.size();
  if (k == send_bufs_.size() || send_bufs_[k].numel() < numel) {
    if (k == send_bufs_.size()) send_bufs_.emplace_back();
    send_bufs_[k] = Tensor::empty({numel});
  }
  copy_bytes(send_bufs_[k].data(), from, numel * sizeof(float));
  if (deferring_) {  // a step's send goes out in its exchange (exchange())
    outgoing_[current_action_] = Outgoing{k, numel, peer, tag};
    pending_.push_back(nullptr);  // holds the buffer's place until then
    return;
  }
  pending_.push_back(pp_.send(flat_view(send_bufs_[k].f32(), LOOM_F32, numel), peer, tag));
}

// One paired group of sends and receives (PipeExchange): group g of this rank with group g of
// each neighbour.
void Pipeline::exchange(const PipeExchange& x, int64_t rows) {
  pp_.group_start();
  for (size_t k : x.sends) {
    const Outgoing& o = outgoing_[k];
    if (o.numel == 0)
      throw RuntimeError("pipeline: action " + std::to_string(k) +
                         "'s output was due in an exchange before it ran");
    pending_[o.buffer] =
        pp_.send(flat_view(send_bufs_[o.buffer].f32(), LOOM_F32, o.numel), o.peer, o.tag);
  }
  if (!eager_receives_)
    for (size_t k : x.recvs) post_receive(k, rows);
  pp_.group_end();
}

void Pipeline::finish_sends() {
  for (loom_work*& w : pending_) {
    loom_work* work = w;
    w = nullptr;
    pp_.wait(work);
  }
  pending_.clear();
}

void Pipeline::take(Tensor& into, loom_work* incoming, const Tensor* inbox, int peer, int tag) {
  const int64_t numel = wire_rows(into.shape()[0]) * into.shape()[1];
  Tensor slice;
  if (incoming) {
    pp_.wait(incoming);
  } else {
    slice = Tensor::empty({numel});
    pp_.recv(flat_view(slice.f32(), LOOM_F32, numel), peer, tag);
    inbox = &slice;
  }
  if (sliced(into.shape()[0]))  // the tp ranks' slices, in rank order, are the whole activation
    tp_->all_gather(flat_view(const_cast<float*>(inbox->f32()), LOOM_F32, numel),
                    flat_view(into.f32(), LOOM_F32, into.numel()));
  else
    copy_bytes(into.data(), inbox->data(), into.numel() * sizeof(float));
}

void Pipeline::run_forward(const model::Microbatch& mb, int index, int chunk, loom_work* incoming,
                           Tensor* inbox, Trace* trace, const std::string& name) {
  const Chunk& ch = chunks_[chunk];
  const int64_t n = model_->api().local_rows(mb.rows());
  Tensor x = x_.rows(0, n);
  const int last = plan_->virtual_stages() - 1;
  if (ch.stage > 0) {
    auto t0 = Clock::now();
    take(x, incoming, inbox, (rank_ + stages_ - 1) % stages_, tag(false, ch.stage - 1, index));
    if (trace) trace->span("recv " + name, "wait", t0, Clock::now());
  }
  auto t0 = Clock::now();
  model_->forward_range(mb, x, ch.first, ch.last);
  auto t1 = Clock::now();
  busy_ms_ += ms_between(t0, t1);
  if (trace) trace->span(name, "forward", t0, t1);
  if (ch.stage == last) {
    loss_ += model_->head_loss();
  } else {
    post(x, (rank_ + 1) % stages_, tag(false, ch.stage, index));
    if (trace) trace->span("send " + name, "send", t1, Clock::now());
  }
}

void Pipeline::run_backward(const model::Microbatch& mb, int index, int chunk, loom_work* incoming,
                            Tensor* inbox, Trace* trace, const std::string& name,
                            const std::function<void(size_t)>& after_layer) {
  const Chunk& ch = chunks_[chunk];
  const int64_t n = model_->api().local_rows(mb.rows());
  Tensor dx = dx_.rows(0, n);
  if (ch.stage < plan_->virtual_stages() - 1) {
    auto t0 = Clock::now();
    take(dx, incoming, inbox, (rank_ + 1) % stages_, tag(true, ch.stage + 1, index));
    if (trace) trace->span("recv " + name, "wait", t0, Clock::now());
  }
  auto t0 = Clock::now();
  if (plan_->split(rank_, index, chunk)) {
    int& set = deferred_of_[static_cast<size_t>(chunk) * plan_->shape().microbatches + index];
    if (free_deferred_.empty()) {
      free_deferred_.push_back(static_cast<int>(deferred_.size()));
      deferred_.emplace_back();
    }
    set = free_deferred_.back();
    free_deferred_.pop_back();
    auto& deferred = deferred_[set];
    model_->backward_input_range(mb, dx, ch.first, ch.last, deferred);
    for (const DeferredWeightGrads& layer : deferred) live_bytes_ += layer.bytes();
    peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
  } else {
    model_->backward_range(mb, dx, ch.first, ch.last, after_layer);
  }
  auto t1 = Clock::now();
  busy_ms_ += ms_between(t0, t1);
  if (trace) trace->span(name, "backward", t0, t1);
  if (ch.stage > 0) {
    post(dx, (rank_ + stages_ - 1) % stages_, tag(true, ch.stage, index));
    if (trace) trace->span("send " + name, "send", t1, Clock::now());
  }
}

void Pipeline::run_weight(int index, int chunk, Trace* trace, const std::string& name,
                          const std::function<void(size_t)>& after_layer) {
  const Chunk& ch = chunks_[chunk];
  int& set = deferred_of_[static_cast<size_t>(chunk) * plan_->shape().microbatches + index];
  auto& deferred = deferred_[set];
  for (const DeferredWeightGrads& layer : deferred) live_bytes_ -= layer.bytes();
  auto t0 = Clock::now();
  model_->weight_range(deferred, ch.first, ch.last, after_layer);
  auto t1 = Clock::now();
  free_deferred_.push_back(set);
  set = -1;
  busy_ms_ += ms_between(t0, t1);
  if (trace) trace->span(name, "weight", t0, t1);
}

// The receive of action k's input, into its own buffer.
void Pipeline::post_receive(size_t k, int64_t rows) {
  const loom_pipe_action& a = plan_->actions(rank_)[k];
  const int s = plan_->virtual_stage(rank_, a.chunk);
  const bool forward = a.op == LOOM_PIPE_FORWARD;
  const int64_t numel = wire_rows(rows) * model_->config().d_model;
  if (recv_bufs_[k].numel() < numel) recv_bufs_[k] = Tensor::empty({numel});
  const int peer = forward ? (rank_ + stages_ - 1) % stages_ : (rank_ + 1) % stages_;
  receives_[k] = pp_.irecv(flat_view(recv_bufs_[k].f32(), LOOM_F32, numel), peer,
                           tag(!forward, forward ? s - 1 : s + 1, a.microbatch));
}

// A step's counters and per-action state, what one micro-batch leaves in each chunk's slots, and
// on the CPU every receive posted (eager_receives_).
void Pipeline::start_step(int64_t B, int64_t T, int64_t rows) {
  const size_t n = plan_->actions(rank_).size();
  loss_ = 0;
  busy_ms_ = 0;
  live_ = peak_live_ = 0;
  live_bytes_ = peak_live_bytes_ = 0;
  for (Chunk& ch : chunks_) {
    model::Microbatch probe{nullptr, nullptr, B, T, 0.f};
    ch.bytes = 0;
    for (size_t i = ch.first; i < ch.last; ++i) ch.bytes += model_->layer_saved_bytes(i, probe);
  }
  receives_.assign(n, nullptr);
  if (recv_bufs_.size() < n) recv_bufs_.resize(n);
  outgoing_.assign(n, Outgoing{});
  if (eager_receives_)
    for (const PipeExchange& x : exchanges_)
      for (size_t k : x.recvs) post_receive(k, rows);
}

double Pipeline::train_step(const BatchFn& batch, int64_t B, int64_t T, float dloss,
                            const std::function<void(size_t)>& after_layer, Trace* trace,
                            PipeStepStats& stats) {
  const auto& shape = plan_->shape();
  const int m = shape.microbatches;
  for (int i = 0; i < m; ++i) batch(i, tokens_[i].data(), targets_[i].data());
  const auto& actions = plan_->actions(rank_);
  const std::vector<size_t> last_gradients = last_gradient_actions();
  static const std::function<void(size_t)> none;
  const auto start = Clock::now();
  const int64_t rows = model_->api().local_rows(B * T);
  start_step(B, T, rows);
  deferring_ = true;
  struct StopDeferring {  // also when the step throws: evaluation and samples send at once
    bool& flag;
    ~StopDeferring() { flag = false; }
  } stop_deferring{deferring_};
  size_t next_exchange = 0;
  auto exchanges_before = [&](size_t k) {
    for (; next_exchange < exchanges_.size() && exchanges_[next_exchange].before <= k;
         ++next_exchange)
      exchange(exchanges_[next_exchange], rows);
  };
  for (size_t k = 0; k < actions.size(); ++k) {
    exchanges_before(k);
    current_action_ = k;
    const loom_pipe_action& a = actions[k];
    plugins::set_micro_batch(a.microbatch);  // loom.step: the micro-batch this action runs
    model::Microbatch mb{tokens_[a.microbatch].data(), targets_[a.microbatch].data(), B, T, dloss};
    int& slot = slot_of_[static_cast<size_t>(a.chunk) * m + a.microbatch];
    std::string name = "FBW"[a.op] + std::to_string(a.microbatch);
    if (shape.chunks > 1) name += "." + std::to_string(a.chunk);
    Chunk& ch = chunks_[a.chunk];
    if (a.op == LOOM_PIPE_FORWARD) {
      if (ch.free_slots.empty()) ch.free_slots.push_back(ch.slots++);
      slot = ch.free_slots.back();
      ch.free_slots.pop_back();
      peak_live_ = std::max(peak_live_, ++live_);
      peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_ += ch.bytes);
      model_->use_slot(slot, ch.first, ch.last);
      run_forward(mb, a.microbatch, a.chunk, receives_[k], &recv_bufs_[k], trace, name);
      receives_[k] = nullptr;
    } else if (a.op == LOOM_PIPE_WEIGHT) {
      run_weight(a.microbatch, a.chunk, trace, name,
                 k == last_gradients[a.chunk] ? after_layer : none);
    } else {
      model_->use_slot(slot, ch.first, ch.last);
      run_backward(mb, a.microbatch, a.chunk, receives_[k], &recv_bufs_[k], trace, name,
                   k == last_gradients[a.chunk] ? after_layer : none);
      receives_[k] = nullptr;
      ch.free_slots.push_back(slot);
      slot = -1;
      --live_;
      live_bytes_ -= ch.bytes;
    }
  }
  plugins::set_micro_batch(-1);
  exchanges_before(actions.size());
  deferring_ = false;
  auto t0 = Clock::now();
  finish_sends();
  if (trace) trace->span("wait sends", "wait", t0, Clock::now());
  if (trace) trace->span("schedule", "step", start, Clock::now());
  return step_totals(start, stats);
}

// The loss (only the last stage's is non-zero) and each stage's compute time in one all-reduce:
// a stage that computes longer than the others paces the pipeline (loom doctor names it).
double Pipeline::step_totals(Clock::time_point start, PipeStepStats& stats) {
  stats.schedule_ms = ms_between(start, Clock::now());
  stats.busy_ms = busy_ms_;
  stats.peak_in_flight = peak_live_;
  stats.peak_activation_bytes = peak_live_bytes_;
  std::vector<double> sums(size_t(stages_) + 1, 0.0);
  sums[0] = loss_;
  sums[size_t(rank_) + 1] = busy_ms_;
  pp_.all_reduce(flat_view(sums.data(), LOOM_F64, int64_t(sums.size())), LOOM_REDUCE_SUM);
  stats.stage_busy_ms.assign(sums.begin() + 1, sums.end());
  return sums[0];
}

// The last action through each chunk that adds weight gradients (a backward, or the weight half
// of a split one): its layers' gradients are final when it ends.
std::vector<size_t> Pipeline::last_gradient_actions() const {
  const auto& actions = plan_->actions(rank_);
  std::vector<size_t> last(plan_->shape().chunks, 0);
  for (size_t k = 0; k < actions.size(); ++k) {
    const loom_pipe_action& a = actions[k];
    if (a.op == LOOM_PIPE_WEIGHT ||
        (a.op == LOOM_PIPE_BACKWARD && !plan_->split(rank_, a.microbatch, a.chunk)))
      last[a.chunk] = k;
  }
  return last;
}

// Micro-batch after micro-batch, each through the chunks in order: a forward's input was sent
// by an action earlier in the same order, so this too finishes.
double Pipeline::evaluate(const BatchFn& batch, int n, int64_t B, int64_t T) {
  loss_ = 0;
  model_->use_slot(0, 0, model_->layer_count());
  for (int i = 0; i < n; ++i) {
    batch(i, tokens_[0].data(), targets_[0].data());
    model::Microbatch mb{tokens_[0].data(), targets_[0].data(), B, T, 0.f};
    for (int c = 0; c < plan_->shape().chunks; ++c)
      run_forward(mb, 0, c, nullptr, nullptr, nullptr, "");
    finish_sends();
  }
  double loss = loss_;
  pp_.all_reduce(flat_view(&loss, LOOM_F64, 1), LOOM_REDUCE_SUM);
  return loss;
}

// The context, padded on the right to a multiple of tp (sequence parallelism splits rows; the
// causal mask keeps the padding from the last real position), forward through the chunks as one
// micro-batch; the last stage's rank holds the logits and the pp group sums them to everyone.
std::vector<float> Pipeline::next_logits(const std::vector<int32_t>& ctx) {
  const int64_t tp = model_->api().tp_size(), T = static_cast<int64_t>(ctx.size());
  std::vector<int32_t> window(ctx);
  window.resize(std::min(model_->config().seq_len, (T + tp - 1) / tp * tp), 0);
  const model::Microbatch mb{window.data(), nullptr, 1, static_cast<int64_t>(window.size()), 0.f};
  model_->use_slot(0, 0, model_->layer_count());
  for (int c = 0; c < plan_->shape().chunks; ++c)
    run_forward(mb, 0, c, nullptr, nullptr, nullptr, "");
  finish_sends();
  std::vector<float> row(model_->config().vocab_size, 0.f);
  if (model_->has_head()) {
    std::vector<float> full = model_->api().logits_row(model_->logits(), T - 1);
    std::copy(full.begin(), full.begin() + static_cast<int64_t>(row.size()), row.begin());
  }
  pp_.all_reduce(flat_view(row.data(), LOOM_F32, static_cast<int64_t>(row.size())),
                 LOOM_REDUCE_SUM);
  return row;
}

void Pipeline::sync_tied(ParamStore& params, DataParallel* dp) {
  if (!model_->config().tied_embeddings) return;
  const int last = stages_ - 1,
            sync_tag = 2 * plan_->virtual_stages() * plan_->shape().microbatches;
  if (rank_ != 0 && rank_ != last) return;
  Param& wte = params.get("wte");
  float* grad = nullptr;
  int64_t n = 0;
  if (dp && dp->sharded()) {  // this dp rank's piece of it
    for (const loom_shard_piece& pc : dp->shard_pieces())
      if (pc.param == wte.index) grad = pc.grad, n = pc.count;
    if (n == 0) return;  // the same on the other stage: both pieces are padding
  } else {
    grad = wte.grad.f32(), n = wte.grad.numel();
  }
  loom_tensor g = flat_view(grad, LOOM_F32, n);
  if (rank_ == last) {  // the mirror: send ours, take back the sum
    pp_.wait(pp_.send(g, 0, sync_tag));
    pp_.recv(g, 0, sync_tag + 1);
  } else {  // the owner adds the mirror's and returns the same bits
    Tensor theirs = Tensor::empty({n});
    pp_.recv(flat_view(theirs.f32(), LOOM_F32, n), last, sync_tag);
    model_->api().ops()->accumulate(grad, theirs.f32(),
                                    n);  // a kernel: on a device, grad is device memory
    pp_.wait(pp_.send(g, last, sync_tag + 1));
  }
}

}  // namespace loom::train
