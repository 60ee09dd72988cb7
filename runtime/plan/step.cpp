#include "plan/step.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

#include "core/errors.hpp"
#include "ops/ops.hpp"
#include "train/pipeline.hpp"

namespace loom::plan {

namespace {

// Parameters of the model by part, as Loom declares them (models/gpt).
struct ParamCounts {
  double attention = 0, mlp = 0, expert_mlp = 0, router = 0, norms = 0;  // one block each
  double embed = 0, head = 0;
};

ParamCounts count_params(const model::Config& m) {
  ParamCounts p;
  const double d = double(m.d_model), bias = m.bias ? 1 : 0;
  p.attention =
      d * m.qkv_width() + d * d + (m.qkv_bias() ? m.qkv_width() : 0) + (m.proj_bias() ? d : 0);
  p.mlp = d * m.fc_out() + double(m.d_ff) * d + bias * (m.fc_out() + d);
  p.router = m.moe.experts > 0 ? d * m.moe.experts : 0;
  p.expert_mlp = p.mlp * m.moe.experts;
  p.norms = (m.norm == "rmsnorm" || !m.bias ? 1 : 2) * 2 * d;
  p.embed = double(m.vocab_size) * d +
            (m.learned_positions() ? double(std::max(m.max_positions, m.seq_len)) * d : 0);
  p.head = m.tied_embeddings ? 0 : double(m.vocab_size) * d;
  return p;
}

BlockWork block_work(const model::Config& m, const Layout& l, double tokens, int act_bytes,
                     bool moe) {
  BlockWork w;
  const double d = double(m.d_model), tp = l.tp, N = tokens, n = l.sp ? tokens / l.tp : tokens;
  const double qkv = double(m.qkv_width()) / tp, fc = double(m.fc_out()) / tp,
               ff = double(m.d_ff) / tp;
  const double k = moe ? double(m.moe.top_k) : 1.0;
  // 2 flops per multiply-add: q/k/v, the output projection, and the MLP's two (three) matrices.
  w.gemm_flops = 2 * N * d * (qkv + d / tp) + k * 2 * N * d * (fc + ff) +
                 (moe ? 2 * N * d * m.moe.experts : 0);
  w.gemm_calls = (m.grouped_query() ? 3 : 2) + (moe ? 1 + 2 * m.moe.top_k : 2);
  // Scores and the weighted sum, 2 x 2 T d flops per token over the whole context, half of it
  // under the causal mask.
  w.attn_flops = 0.5 * 4 * N * double(m.seq_len) * d / tp;
  // Element-wise traffic: two norms (read, write), two residual adds (2 reads, 1 write), RoPE on
  // q and k, the MLP activation (read fc, write ff), and the copies a block saves.
  const double rope = m.rope() ? 2 * N * double(m.n_head + m.kv_heads()) * m.head_dim() / tp : 0;
  const double elems = 4 * n * d + 6 * n * d + rope + k * N * (fc + ff) + 2 * n * d;
  w.elem_bytes = elems * act_bytes;
  w.elem_calls = 8 + (m.rope() ? 2 : 0);
  w.norm_act_bytes = (4 * n * d + k * N * (fc + ff)) * act_bytes;
  // What Block::saved_bytes keeps: x_in, x_mid and both norm outputs on the rows held here; on
  // all rows this rank's q, k, v, attention output, MLP pre-activation and activation.
  w.saved_elems = 4 * n * d + N * (qkv + d / tp) + k * N * (fc + ff);
  // A MoE block also keeps each routed row's gathered input and expert output, and the router's
  // probabilities, choices and weights (MoeMlp::saved_bytes).
  if (moe) w.saved_elems += k * N * 2 * d + N * double(m.moe.experts + 1 + m.moe.top_k) + 3 * k * N;
  w.selective_drop = 2 * n * d + k * N * ff;
  return w;
}

// A ring collective of S bytes over n ranks on one link: bytes each rank moves, and hops.
double ring_time(int op, double S, int n, const Link& link, double eff) {
  if (n <= 1 || S <= 0) return 0;
  const double bw = link.bandwidth * eff;
  switch (op) {
    case LOOM_COST_ALL_REDUCE:
      return 2.0 * (n - 1) / n * S / bw + 2.0 * (n - 1) * link.latency;
    case LOOM_COST_SEND_RECV:
      return S / bw + link.latency;
    default:
      return double(n - 1) / n * S / bw + (n - 1) * link.latency;  // gather, scatter, all-to-all
  }
}

const char* op_name(int op) {
  switch (op) {
    case LOOM_COST_ALL_REDUCE:
      return "all_reduce";
    case LOOM_COST_REDUCE_SCATTER:
      return "reduce_scatter";
    case LOOM_COST_ALL_GATHER:
      return "all_gather";
    case LOOM_COST_ALL_TO_ALL:
      return "all_to_all";
    default:
      return "send_recv";
  }
}

// Ranks of one mesh axis are `stride` apart (tp innermost, then cp, ep, dp, pp). A group whose
// span fits in a node stays on NVLink; otherwise `local` members share a node and the bytes move
// hierarchically: the node part first, then S / local over the network, NIC by NIC
// (rail-optimised), slower by the oversubscription when the group spans more than a pod. NCCL
// runs all-gather and reduce-scatter as one ring through every member, so their latency is n - 1
// hops, each as slow as the slowest link the ring crosses; an all-reduce's tree pays the
// hierarchical hops.
double collective_time(const Cluster& c, int op, double S, int n, int stride, std::string& level) {
  if (n <= 1) return level = "-", 0.0;
  const Link& intra = c.intra_ops.has[op] ? c.intra_ops.op[op] : c.intra;
  const long span = long(stride) * n;
  // Each device drives nics / per_node NICs (DGX: one each). Without rails, or past a pod,
  // traffic crosses the spine and shares its oversubscribed links.
  Link net = c.inter;
  net.bandwidth = c.inter.bandwidth * std::max(1, c.nics_per_node) / c.per_node;
  const long span_nodes = (span + c.per_node - 1) / c.per_node;
  if (!c.rail_optimized || (c.nodes_per_pod > 0 && span_nodes > c.nodes_per_pod))
    net.bandwidth /= c.oversubscription;
  if (op ==
      LOOM_COST_SEND_RECV) {  // neighbours stride apart: as slow as a hop that leaves the node
    const bool same = span <= c.per_node;
    level = same ? "node" : "network";
    return ring_time(op, S, 2, same ? intra : net, c.comm_eff);
  }
  if (span <= c.per_node) return level = "node", ring_time(op, S, n, intra, c.comm_eff);
  const int local = std::max(1, std::min(n, c.per_node / std::max(1, stride)));
  const int nodes = (n + local - 1) / local;
  level = local > 1 ? "node+network" : "network";
  double t =
      ring_time(op, S, local, intra, c.comm_eff) + ring_time(op, S / local, nodes, net, c.comm_eff);
  if (S > 0 && (op == LOOM_COST_ALL_GATHER || op == LOOM_COST_REDUCE_SCATTER))  // one ring, all n
    t += (n - 1) * std::max(intra.latency, net.latency) -
         ((local - 1) * intra.latency + (nodes - 1) * net.latency);
  return t;
}

Rates rates(const Cluster& c, const Workload& w, const Layout& l) {
  Rates r;
  r.peak = c.peak(w.dtype);
  r.bytes = c.hbm;
  r.compute_scale = c.compute_scale;
  if (c.shared_cores > 0) {
    const int ranks = std::min(l.world(), c.per_node);
    const double together =
        ranks == 1 ? c.thread_scaling : c.rank_scaling;  // every core busy either way
    const double share = together / ranks;
    if (ranks > 1) r.compute_scale = c.rank_compute_scale;
    r.peak *= share;
    r.bytes *= share;
  }
  return r;
}

std::string gib(double b) {
  std::ostringstream os;
  os.precision(b < 10.0 * (1 << 30) ? 2 : 3);
  os << b / double(1ull << 30) << " GiB";
  return os.str();
}

}  // namespace

Step::Step(const Cluster& c_, const Workload& w_, const Layout& l_, const StagePart& part_)
    : c(c_),
      w(w_),
      l(l_),
      m(w_.model),
      r(rates(c_, w_, l_)),
      act_bytes(w_.dtype == "fp32" ? 4 : 2),
      grad_bytes(w_.grad_bytes),
      mbs(microbatches(w_, l_)),
      data_group(l_.data_ranks()),
      tokens(double(l_.micro_batch) * m.seq_len / l_.cp),
      layers(part_.blocks),
      moe_layers(part_.moe_blocks),
      vocab(double(m.vocab_size) / l_.tp),
      dense(block_work(m, l_, tokens, act_bytes, false)),
      moe(block_work(m, l_, tokens, act_bytes, true)),
      part(part_) {
  e.layout = l;
  e.microbatches = mbs;
}

double Step::attn(double flops, double calls) const {
  const double eff = w.unfused_attention ? c.attention_unfused_eff : c.attention_eff;
  return calls * c.attention_overhead + flops / (r.peak * eff);
}

// Forward, backward and recompute of one micro-batch through this rank's blocks and its share
// of the head (the average rank's: 1 / pp; the pipeline's busiest is stage_imbalance()'s).
void Step::compute() {
  const double head_flops = 2 * tokens * m.d_model * vocab,
               head_bytes = 3 * tokens * vocab * 4 + 2 * tokens * m.d_model * act_bytes;
  const double blocks_gemm = gemm(mix(&BlockWork::gemm_flops), mix(&BlockWork::gemm_calls));
  const double blocks_elem = elem(mix(&BlockWork::elem_bytes), mix(&BlockWork::elem_calls));
  // Unfused attention writes the whole [heads, T, T] score matrix per sequence (the mask is
  // applied to it, not skipped), and softmax and dropout read and write it again.
  scores =
      double(l.micro_batch) * (double(m.n_head) / l.tp) * m.seq_len * (double(m.seq_len) / l.cp);
  f_attn = attn(mix(&BlockWork::attn_flops), layers) +
           (w.unfused_attention ? elem(layers * scores * c.score_bytes, 0) : 0);
  block_s = (blocks_gemm + f_attn + blocks_elem) / std::max(layers, 1e-9);
  head_s = gemm(head_flops, 1) + elem(head_bytes, 3);
  const double f_gemm = blocks_gemm + gemm(head_flops, 1) * part.head_share,
               f_elem = blocks_elem + elem(head_bytes, 3) * part.head_share;
  head_gemm = head_flops * part.head_share / (r.peak * c.gemm_eff) * r.compute_scale;
  f = (f_gemm + f_attn + f_elem) * r.compute_scale;
  // Backward: two GEMMs per forward GEMM, flash-style attention backward (2.5x), element-wise 2x.
  b = (2 * f_gemm + 2.5 * f_attn + 2 * f_elem) * r.compute_scale;
  if (l.recompute == "full")
    rc = f - head_gemm;
  else if (l.recompute == "selective")
    rc = elem(mix(&BlockWork::norm_act_bytes), 3 * layers) * r.compute_scale;
  // Two published policies Loom does not run (so the search never ranks them). Megatron's
  // selective (Korthikanti et al. 2022) reruns the attention core, the scores with it;
  // torchtitan's per-op policy reruns every other matmul and every element-wise op.
  else if (l.recompute == "selective-megatron")
    rc = f_attn * r.compute_scale;
  else if (l.recompute == "selective-op")
    rc = (gemm(mix(&BlockWork::gemm_flops) / 2, mix(&BlockWork::gemm_calls) / 2) +
          elem(mix(&BlockWork::elem_bytes), mix(&BlockWork::elem_calls))) *
         r.compute_scale;
  b += rc;
}

// What the framework balances its stages by (Workload::stage_split).
std::vector<double> Step::split_costs() const {
  if (w.stage_split == "blocks") {
    std::vector<double> c(size_t(m.n_layer) + 2, 1.0);
    c.front() = c.back() = 0;
    return c;
  }
  if (w.stage_split == "count") return std::vector<double>(size_t(m.n_layer) + 2, 1.0);
  return train::layer_costs(m);
}

// The busiest rank's forward over the mean's: block_s per block, head_s for the head (the
// embedding's lookup counts as nothing), summed over each rank's virtual stages.
double Step::stage_imbalance() const {
  std::vector<double> load(size_t(l.pp), 0.0);
  double total = 0;
  for (size_t i = 0; i < shape.stage_of.size(); ++i) {
    const double t = i == 0 ? 0 : i + 1 == shape.stage_of.size() ? head_s : block_s;
    load[size_t(shape.stage_of[i] % l.pp)] += t, total += t;
  }
  return total > 0 ? *std::max_element(load.begin(), load.end()) / (total / l.pp) : 1;
}

// Parameters of this rank's part, / tp: its blocks, and the average rank's larger end (embedding
// or head), or a stage's own (the last keeps a tied embedding for its head).
void Step::parameters() {
  const ParamCounts pc = count_params(m);
  const double blocks = (layers - moe_layers) * (pc.attention + pc.mlp + pc.norms) +
                        moe_layers * (pc.attention + pc.norms + pc.router + pc.expert_mlp / l.ep);
  const double tied_copy =
      part.first ? 0
                 : double(m.vocab_size) * m.d_model;  // a last stage's own copy of a tied matrix
  const double ends = part.average ? (l.pp == 1 ? pc.embed + pc.head : std::max(pc.embed, pc.head))
                                   : (part.first ? pc.embed : 0) +
                                         (part.last ? (pc.head > 0 ? pc.head : tied_copy) : 0);
  psi = (blocks + ends) / l.tp;
  expert_psi = moe_layers * pc.expert_mlp / l.ep / l.tp;
}

// A mesh axis' size and the rank stride between its members (tp -> cp -> ep -> dp -> pp).
std::pair<int, int> Step::axis_extent(int axis) const {
  const int sizes[LOOM_AXES] = {l.tp, l.cp, l.ep, l.dp, l.pp};
  int stride = 1;
  for (int a = 0; a < axis && a < LOOM_AXES; ++a) stride *= sizes[a];
  return {axis >= 0 && axis < LOOM_AXES ? sizes[axis] : 1, stride};
}

loom_cost_query Step::query() const {
  loom_cost_query q{};
  q.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof(loom_cost_query)};
  q.zero_stage = l.zero;
  q.params = int64_t(psi);
  q.expert_params = int64_t(expert_psi);
  q.expert_dp = l.dp * l.cp;
  q.grad_bytes = grad_bytes;
  q.act_bytes = act_bytes;
  q.tokens = int64_t(tokens);
  q.d_model = m.d_model;
  q.kv_width = 2 * m.kv_heads() * m.head_dim() / l.tp;
  q.layers = int32_t(std::ceil(layers));
  q.moe_layers = int32_t(std::ceil(moe_layers));
  q.top_k = int32_t(m.moe.top_k);
  q.microbatches = mbs;
  q.chunks = l.chunks;
  q.sequence_parallel = l.sp;
  q.tp = l.tp;
  q.comm_shares_cores = c.shared_cores > 0;
  return q;
}

// Every strategy's collectives from its cost entry, timed on its link. Those inside the
// micro-batch loop hide behind that phase's attention at most, and the rest lands on the loop.
void Step::collectives(const CostSource& costs) {
  struct Axis {
    std::string plugin;
    int size, stride;  // mesh order tp -> cp -> ep -> dp -> pp; the data group's stride is tp
  };
  std::vector<Axis> axes;
  auto named = [](const std::string& chosen, const char* builtin) {
    return chosen.empty() ? std::string(builtin) : chosen;
  };
  if (l.tp > 1) axes.push_back({named(w.tensor_plugin, "tp"), l.tp, 1});
  if (l.sp) axes.push_back({named(w.sequence_plugin, "sp"), l.tp, 1});
  if (l.cp > 1) axes.push_back({named(w.context_plugin, "cp"), l.cp, l.tp});
  if (l.ep > 1) axes.push_back({named(w.expert_plugin, "ep"), l.ep, l.tp * l.cp});
  if (data_group > 1) axes.push_back({l.data_plugin(w), data_group, l.tp});
  if (l.pp > 1) axes.push_back({l.schedule, l.pp, l.tp * l.cp * l.ep * l.dp});
  loom_cost_query q = query();
  for (const Axis& a : axes) {
    q.group = a.size;
    bool has = false;
    for (const loom_cost_collective& cc : costs(a.plugin, q, has)) {
      CommItem it;
      it.plugin = a.plugin;
      it.what = cc.what;
      it.op = op_name(cc.op);
      it.phase = cc.phase == LOOM_COST_FORWARD    ? "forward"
                 : cc.phase == LOOM_COST_BACKWARD ? "backward"
                                                  : "step";
      it.group = cc.group > 0 ? cc.group : a.size;
      it.bytes = double(cc.bytes);
      it.calls = double(cc.calls) / std::max(1, cc.every);  // every k steps: 1 / k per step
      it.hidden = cc.hidden;
      // A sub-group of the axis (ddp's expert gradients over expert_dp) spans as far as the axis;
      // a collective on another axis (a pipeline's all-gather over tp) spans that axis.
      int stride =
          it.group == a.size ? a.stride : std::max(1, a.stride * a.size / std::max(1, it.group));
      if (cc.axis > 0) std::tie(it.group, stride) = axis_extent(cc.axis - 1);
      it.ms = collective_time(c, cc.op, it.bytes, it.group, stride, it.level) * it.calls * 1e3;
      if (a.plugin != l.data_plugin(w)) {
        const double window = (cc.phase == LOOM_COST_FORWARD ? f_attn : 2.5 * f_attn) * 1e3 * mbs;
        it.exposed_ms = std::max(0.0, it.ms - std::min(cc.hidden * it.ms, window));
        loop_exposed[cc.phase == LOOM_COST_FORWARD ? 0 : 1] += it.exposed_ms / 1e3 / mbs;
      }
      e.comms.push_back(it);
    }
    if (!has)
      e.notes.push_back("plugin '" + a.plugin +
                        "' has no cost entry: planned as communicating nothing");
  }
  f += loop_exposed[0];
  b += loop_exposed[1];
  // Full recompute replays the blocks' forward, its tp, sp, ep and cp traffic included.
  if (l.recompute == "full") rc += loop_exposed[0], b += loop_exposed[0];
}

// The micro-batch loop: the schedule's makespan in chunk forwards, each as long as the busiest
// rank's (its stages as the schedule plugin splits the layers); the rest is bubble.
void Step::loop(const PipeSource& pipes) {
  if (l.pp == 1) {
    e.pipeline_ms = mbs * (f + b) * 1e3;
  } else {
    shape = pipes(l.schedule, l.pp, mbs, l.chunks, b / f, split_costs());
    e.pipeline_ms = shape.makespan * (f * stage_imbalance() / l.chunks) * 1e3;
  }
  e.forward_ms = mbs * (f - loop_exposed[0]) * 1e3;
  e.recompute_ms = mbs * rc * 1e3;
  e.backward_ms =
      mbs * (b - loop_exposed[1] - rc) * 1e3;  // rc: the recompute, its traffic included
  e.bubble_ms = std::max(0.0, e.pipeline_ms - mbs * (f + b) * 1e3);
}

// The data slot's collectives overlap the backward they run in (the last micro-batch's for a
// once-a-step reduction, every one's for ZeRO-2/3) and ZeRO-3's gathers the forwards; what
// does not fit is exposed. Returns the exposed part.
double Step::data_overlap() {
  double window_fwd = mbs * f * 1e3, window_bwd_all = mbs * b * 1e3,
         window_bwd_last = b / l.chunks * 1e3;
  const auto phase_of = [](const CommItem& it) { return it.phase == "forward" ? 0 : 1; };
  const auto paced = [&](const CommItem& it) {
    return per_unit(it) && it.phase != "step" && it.hidden > 0;
  };
  // Per-unit traffic, phase by phase: one unit's hideable milliseconds, and units per pass.
  double unit_ms[2] = {0, 0}, units[2] = {1, 1}, paced_ms[2] = {0, 0};
  for (const CommItem& it : e.comms)
    if (paced(it)) {
      const int p = phase_of(it);
      unit_ms[p] += it.hidden * it.ms / it.calls, units[p] = it.calls / mbs;
      paced_ms[p] += it.hidden * it.ms;
    }
  double* windows[2] = {&window_fwd, &window_bwd_all};
  double paced_exposed[2] = {0, 0};
  for (int p = 0; p < 2; ++p) {
    if (paced_ms[p] <= 0) continue;
    const double compute_unit = *windows[p] / (mbs * units[p]);
    paced_exposed[p] =
        mbs * (unit_ms[p] + (units[p] - 1) * std::max(0.0, unit_ms[p] - compute_unit));
    paced_exposed[p] = std::min(paced_exposed[p], paced_ms[p]);
    *windows[p] -= paced_ms[p] - paced_exposed[p];
  }
  double exposed = 0;
  for (CommItem& it : e.comms) {
    if (it.plugin != l.data_plugin(w)) continue;
    if (paced(it)) {  // its share of its phase's exposure, and what it could not hide at all
      const int p = phase_of(it);
      it.exposed_ms = (1 - it.hidden) * it.ms +
                      (paced_ms[p] > 0 ? it.hidden * it.ms / paced_ms[p] * paced_exposed[p] : 0);
    } else {
      double* window = it.phase == "forward" ? &window_fwd
                       : it.phase == "backward"
                           ? (it.calls > 1 ? &window_bwd_all : &window_bwd_last)
                           : nullptr;
      const double can_hide = window ? std::min(*window, it.hidden * it.ms) : 0;
      if (window) *window -= can_hide;
      it.exposed_ms = it.ms - can_hide;
    }
    exposed += it.exposed_ms;
  }
  for (const CommItem& it : e.comms) e.comm_ms += it.ms, e.exposed_comm_ms += it.exposed_ms;
  e.contention_ms = c.overlap_cost * (e.comm_ms - e.exposed_comm_ms);
  return exposed + e.contention_ms;
}

bool Step::per_unit(const CommItem& it) const {
  return it.plugin == l.data_plugin(w) && l.zero >= 2 && it.calls >= 2.0 * mbs;
}

// AdamW over this rank's shard: read p, g, m, v, write p, m, v (7 x 4 bytes), the grad norm
// (a read of the gradients) and zeroing them.
void Step::optimizer() {
  const double expert_group = l.dp * l.cp;  // ZeRO splits expert units over expert_dp only
  const double opt_params =
      l.zero >= 1 ? (psi - expert_psi) / data_group + expert_psi / expert_group : psi;
  e.optimizer_ms = elem(opt_params * 28 + psi * grad_bytes * 2, 4) * 1e3;
  e.overhead_ms = c.step_overhead * 1e3;
}

// Model states by the ZeRO formulas; activations as Loom's blocks keep them, for the
// micro-batches in flight; buffers; the runtime's own.
void Step::memory() {
  double dense_states[3], expert_states[3];
  model_state_bytes(psi - expert_psi, data_group, l.zero, w.dtype != "fp32", dense_states);
  model_state_bytes(expert_psi, l.dp * l.cp, l.zero, w.dtype != "fp32", expert_states);
  e.memory.params = dense_states[0] + expert_states[0];
  e.memory.grads = dense_states[1] + expert_states[1];
  e.memory.optim = dense_states[2] + expert_states[2];
  const double per_layer = mix(&BlockWork::saved_elems) / std::max(layers, 1e-9) * act_bytes;
  const double drop = mix(&BlockWork::selective_drop) / std::max(layers, 1e-9) * act_bytes;
  const double held = l.pp > 1 ? double(shape.in_flight) * layers / l.chunks : layers;
  const double n_rows = l.sp ? tokens / l.tp : tokens;
  // Unfused attention keeps its scores for the backward unless the block is recomputed.
  const double kept_scores =
      w.unfused_attention && l.recompute != "selective-megatron" ? scores * c.score_saved_bytes : 0;
  double acts = held * (per_layer + kept_scores);
  if (l.recompute == "full")
    acts = held * n_rows * m.d_model * act_bytes + per_layer + kept_scores;
  else if (l.recompute == "selective" || l.recompute == "selective-op")
    acts = held * (per_layer + kept_scores - drop) + drop;
  // A split backward (zbh1) keeps its GEMMs' operands until its weight action: each GEMM's
  // input and output gradient, on all rows (sp gathers them), for every chunk pending.
  const double d = m.d_model, tp = l.tp, N = tokens;
  const double operands = N * (4 * d + (d + m.d_ff + m.qkv_width() + m.fc_out()) / tp);
  acts += double(shape.deferred) * layers / l.chunks * operands * act_bytes;
  // The head keeps its logits (fp32) on the last stage (the average rank is charged them too);
  // the embedding's output on the first.
  e.memory.activations =
      acts + (part.average || part.last ? tokens * vocab * 4 : 0) + 2 * n_rows * m.d_model * 4;
  const double bucket = l.zero ? std::min(psi * 4, 2.0 * 25 * (1 << 20))
                               : std::min(psi * grad_bytes, 25.0 * (1 << 20));
  // Each MoE block keeps its backward scratch for the routed rows (gradients of the gathered
  // input, pre-activation, activation and expert output), the same size as what it saves.
  const double moe_scratch = moe_layers * m.moe.top_k * tokens *
                             (2.0 * m.d_model + double(m.fc_out() + m.d_ff) / l.tp) * act_bytes;
  // ZeRO-3 holds a unit gathered while it computes and the units it prefetches ([plugins.zero3]
  // prefetch_depth), and a unit's full gradient until its reduce-scatter.
  double unit_gather = 0, unit_grads = 0;
  for (const CommItem& it : e.comms)
    if (l.zero == 3 && per_unit(it))
      (it.op == "all_gather" ? unit_gather : unit_grads) =
          std::max(it.op == "all_gather" ? unit_gather : unit_grads, it.bytes);
  e.memory.buffers = 2 * tokens * m.d_model * 4 + (data_group > 1 ? bucket : 0) + moe_scratch +
                     (1 + w.zero3_prefetch_depth) * unit_gather + unit_grads;
  e.memory.process = c.process_bytes;
  // A CPU machine's memory is shared by the ranks on it.
  const double ranks_here = c.shared_cores > 0 ? std::min(l.world(), c.per_node) : 1;
  const double usable = c.memory * (1 - c.headroom) / ranks_here;
  e.fits = e.memory.total() <= usable;
  if (!e.fits)
    e.why_not = "needs " + gib(e.memory.total()) + " of " + gib(usable) + " usable (model states " +
                gib(e.memory.model_states()) + ", activations " + gib(e.memory.activations) + ")";
}

// The figures users compare: PaLM's FLOPs (no recompute), per device.
void Step::headline() {
  e.model_flops = m.flops_per_token() * double(w.global_batch) * m.seq_len;
  const double seconds = e.step_ms / 1e3;
  e.tflops_per_device = e.model_flops / seconds / l.world() / 1e12;
  e.mfu = e.model_flops / seconds / (l.world() * r.peak);
  e.tokens_per_s_per_device = double(w.global_batch) * m.seq_len / seconds / l.world();
}

}  // namespace loom::plan
