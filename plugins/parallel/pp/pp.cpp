// Pipeline schedules: gpipe, 1f1b, interleaved and zbh1, one library. Each decides how the model's
// layers split into (virtual) stages and in which order a pp rank runs its micro-batches forward
// and backward; the runtime moves the activations and checks that the order cannot deadlock.
#include <algorithm>
#include <limits>
#include <loom/sdk.hpp>
#include <sstream>

namespace {

using loom::sdk::ConfigError;
using Actions = std::vector<loom_pipe_action>;

loom_pipe_action fwd(int mb, int chunk) { return {LOOM_PIPE_FORWARD, mb, chunk}; }
loom_pipe_action bwd(int mb, int chunk) { return {LOOM_PIPE_BACKWARD, mb, chunk}; }
loom_pipe_action weight(int mb, int chunk) { return {LOOM_PIPE_WEIGHT, mb, chunk}; }

std::string str(int64_t v) { return std::to_string(v); }

// The user's split: '|' separates virtual stages, each a run of E, t and L tokens that must spell
// the model's layers in order ("E t t | t t t | t t L").
std::vector<int32_t> parse_layout(const std::string& layout, const std::string& kinds, int stages) {
  std::vector<int32_t> stage_of;
  int stage = 0;
  bool empty = true;
  std::istringstream in(layout);
  std::string tok;
  auto where = [&] { return "[parallel] pp_layout = \"" + layout + "\": "; };
  while (in >> tok) {
    for (size_t i = 0; i < tok.size(); ++i) {
      char ch = tok[i];
      if (ch == '|') {
        if (empty) throw ConfigError(where() + "stage " + str(stage) + " is empty");
        ++stage, empty = true;
        continue;
      }
      if (ch != 'E' && ch != 't' && ch != 'L')
        throw ConfigError(
            where() + "'" + std::string(1, ch) +
            "' is not a layer (E = embedding, t = transformer block, L = head and loss)");
      const size_t at = stage_of.size();
      if (at >= kinds.size())
        throw ConfigError(where() + "more layers than the model's " + str(kinds.size()) + " (" +
                          str(kinds.size() - 2) + " blocks between E and L)");
      if (kinds[at] != ch)
        throw ConfigError(where() + "layer " + str(at) + " is '" + std::string(1, kinds[at]) +
                          "' in the model, not '" + std::string(1, ch) + "'");
      stage_of.push_back(stage);
      empty = false;
    }
  }
  if (stage_of.size() != kinds.size())
    throw ConfigError(where() + "names " + str(stage_of.size()) + " layers; the model has " +
                      str(kinds.size()) + " (E, " + str(kinds.size() - 2) + " t, L)");
  if (empty) throw ConfigError(where() + "the last stage is empty");
  if (stage + 1 != stages)
    throw ConfigError(where() + str(stage + 1) + " stages; pp x chunks is " + str(stages));
  return stage_of;
}

// Contiguous split of layers into `k` non-empty stages minimising the most expensive stage
// (dynamic programming over split points); ties go to the split that puts layers earlier.
std::vector<int32_t> balance(const std::vector<double>& cost, int k) {
  const int n = static_cast<int>(cost.size());
  if (n < k)
    throw ConfigError("the model has " + str(n) +
                      " pipeline layers (embedding, blocks, head), fewer than the " + str(k) +
                      " stages asked for; lower [parallel] pp (or pp_chunks) or add layers");
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the least max-stage cost of the first i layers in s stages; cut[s][i]: where the
  // last of those stages starts.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(k + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= k; ++s)
    for (int i = s; i <= n; ++i)
      for (int j = s - 1; j < i; ++j) {
        double v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v < best[s][i] * (1 - 1e-12)) best[s][i] = v, cut[s][i] = j;
      }
  std::vector<int32_t> stage_of(n);
  for (int s = k, i = n; s > 0; --s) {
    for (int l = cut[s][i]; l < i; ++l) stage_of[l] = s - 1;
    i = cut[s][i];
  }
  return stage_of;
}

class Schedule : public loom::sdk::PipelinePlugin {
 public:
  static constexpr loom_option_spec kOptions[] = {
      {"scatter_gather", LOOM_OPT_BOOL, "true",
       "with tp > 1 (no sp), each tp rank sends 1/tp of the activations and the next stage "
       "all-gathers them"},
      {nullptr, 0, nullptr, nullptr},
  };
  // Every schedule moves the same bytes (REFERENCE.md): each micro-batch's [tokens, d_model]
  // activations forward and their gradients backward, once per chunk boundary a rank owns.
  // Under sp a rank holds 1/tp of the rows; with scatter_gather (Megatron's scatter/gather,
  // Narayanan et al. 2021, 4.1) a tp rank sends its 1/tp slice and the receiver all-gathers them
  // over tp. Sends do not block the sender; the receiver's wait is the schedule's, so none is
  // hidden.
  static std::vector<loom_cost_collective> cost(const loom_cost_query& q,
                                                const loom::sdk::Options& o) {
    using loom::sdk::collective;
    const int tp = std::max(1, q.tp);
    const bool gather = !q.sequence_parallel && tp > 1 && o.boolean("scatter_gather");
    const int64_t act = q.tokens * q.d_model * q.act_bytes,
                  calls = int64_t(q.microbatches) * std::max(1, q.chunks);
    const int64_t wire = q.sequence_parallel || gather ? act / tp : act;
    std::vector<loom_cost_collective> c = {
        collective(LOOM_COST_SEND_RECV, LOOM_COST_FORWARD, wire, calls, 0.0,
                   "activations to the next stage"),
        collective(LOOM_COST_SEND_RECV, LOOM_COST_BACKWARD, wire, calls, 0.0,
                   "gradients to the previous stage")};
    if (gather)
      for (loom_cost_phase phase : {LOOM_COST_FORWARD, LOOM_COST_BACKWARD})
        c.push_back(loom::sdk::on_axis(collective(LOOM_COST_ALL_GATHER, phase, act, calls, 0.0,
                                                  "stage input all-gather over tp"),
                                       LOOM_AXIS_TP));
    return c;
  }
  std::vector<int32_t> partition(const loom_pipeline_shape& shape, const std::string& kinds,
                                 const std::vector<double>& costs,
                                 const std::string& layout) override {
    const int stages = shape.stages * shape.chunks;
    return layout.empty() ? balance(costs, stages) : parse_layout(layout, kinds, stages);
  }

 protected:
  static void one_chunk(const loom_pipeline_shape& shape, const char* name) {
    if (shape.chunks > 1)
      throw ConfigError(
          "[parallel] pp_chunks = " + str(shape.chunks) + ": the " + name +
          " schedule runs one model chunk per rank; chunks > 1 need pipeline = \"interleaved\"");
  }
};

// A schedule that runs one model chunk per rank (the default, and the only count it takes).
template <class Named>
struct OneChunk : Schedule {
  void configure(loom_pipeline_shape& shape) override {
    if (shape.chunks == 0) shape.chunks = 1;
    one_chunk(shape, Named::about.name);
  }
};

// GPipe (Huang et al. 2019): every micro-batch forward, then every one backward. Simple, and
// the first stage holds all m micro-batches' activations at once.
struct GPipe : OneChunk<GPipe> {
  static constexpr loom::sdk::About about{
      .name = "gpipe",
      .version = "1.0.0",
      .summary = "pipeline schedule: all forwards, then all backwards",
      .options = kOptions,
      .cost = &cost};
  explicit GPipe(const loom::sdk::Context&) {}
  Actions schedule(const loom_pipeline_shape& shape, int) override {
    Actions a;
    for (int mb = 0; mb < shape.microbatches; ++mb) a.push_back(fwd(mb, 0));
    for (int mb = 0; mb < shape.microbatches; ++mb) a.push_back(bwd(mb, 0));
    return a;
  }
};

// 1F1B (PipeDream-Flush, Narayanan et al. 2021): rank r warms up with p - r - 1 forwards, then
// alternates one forward and one backward, then drains the backwards. Same bubble as GPipe, but
// at most p - r micro-batches are in flight on rank r.
struct OneFOneB : OneChunk<OneFOneB> {
  static constexpr loom::sdk::About about{
      .name = "1f1b",
      .version = "1.0.0",
      .summary = "pipeline schedule: warm-up, one forward one backward, cool-down",
      .options = kOptions,
      .cost = &cost};
  explicit OneFOneB(const loom::sdk::Context&) {}
  Actions schedule(const loom_pipeline_shape& shape, int rank) override {
    const int m = shape.microbatches, warm = std::min(shape.stages - rank - 1, m);
    Actions a;
    for (int i = 0; i < warm; ++i) a.push_back(fwd(i, 0));
    for (int i = 0; i < m - warm; ++i) a.push_back(fwd(warm + i, 0)), a.push_back(bwd(i, 0));
    for (int i = m - warm; i < m; ++i) a.push_back(bwd(i, 0));
    return a;
  }
};

// Interleaved 1F1B (Narayanan et al. 2021, section 2.2): each rank holds v model chunks, so a
// micro-batch goes round the ranks v times and the bubble shrinks by v. Work is taken in groups
// of p micro-batches per chunk: forward unit k is micro-batch (k / pv) p + k % p of chunk
// (k / p) % v; backward units run the chunks in reverse. Rank r warms up with
// 2 (p - r - 1) + (v - 1) p forward units, then alternates, then drains.
struct Interleaved : Schedule {
  static constexpr loom::sdk::About about{
      .name = "interleaved",
      .version = "1.0.0",
      .summary = "pipeline schedule: interleaved 1F1B over v model chunks per rank",
      .options = kOptions,
      .cost = &cost};
  explicit Interleaved(const loom::sdk::Context&) {}
  void configure(loom_pipeline_shape& shape) override {
    if (shape.chunks == 0) shape.chunks = 2;
    if (shape.chunks < 2)
      throw ConfigError(
          "[parallel] pp_chunks = " + str(shape.chunks) +
          ": the interleaved schedule needs at least 2 model chunks per rank (1 chunk is 1f1b)");
    if (shape.microbatches % shape.stages != 0)
      throw ConfigError(
          "the interleaved schedule needs the micro-batch count to be a multiple of pp: " +
          str(shape.microbatches) +
          " micro-batches (global_batch / dp / micro_batch) over pp = " + str(shape.stages) +
          "; use " + str((shape.microbatches / shape.stages + 1) * shape.stages) +
          " micro-batches, or the 1f1b schedule");
  }
  Actions schedule(const loom_pipeline_shape& shape, int rank) override {
    const int p = shape.stages, v = shape.chunks, units = shape.microbatches * v;
    auto unit = [&](int k, bool forward) {
      const int group = k / (p * v), chunk = (k / p) % v, mb = group * p + k % p;
      return forward ? fwd(mb, chunk) : bwd(mb, v - 1 - chunk);
    };
    const int warm = std::min(2 * (p - rank - 1) + (v - 1) * p, units);
    Actions a;
    for (int k = 0; k < warm; ++k) a.push_back(unit(k, true));
    for (int k = 0; k < units - warm; ++k)
      a.push_back(unit(warm + k, true)), a.push_back(unit(k, false));
    for (int k = units - warm; k < units; ++k) a.push_back(unit(k, false));
    return a;
  }
};

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3): 1F1B with every backward
// split into B (the input gradient, which the previous stage waits for) and W (the weight
// gradients, which nobody waits for). Rank r runs rounds x = 0 .. m + p - 2 of
//   F(x), B(x - (p - 1 - r)), W(x - (p - 1)),
// skipping indices outside [0, m). The Bs are 1F1B's, so at most p - r micro-batches hold their
// full activations on rank r, as under 1F1B; each W is deferred by r rounds beyond its B, and those
// Ws fill the cool-down that 1F1B leaves idle. With F = B = W the idle time per rank is
// (p - 1)(F + B - W), a third of 1F1B's (p - 1)(F + B + W).
struct ZeroBubbleH1 : OneChunk<ZeroBubbleH1> {
  static constexpr loom::sdk::About about{.name = "zbh1",
                                          .version = "1.0.0",
                                          .summary =
                                              "pipeline schedule: zero-bubble ZB-H1, 1F1B with "
                                              "weight gradients deferred into the bubble",
                                          .options = kOptions,
                                          .cost = &cost};
  explicit ZeroBubbleH1(const loom::sdk::Context&) {}
  Actions schedule(const loom_pipeline_shape& shape, int rank) override {
    const int m = shape.microbatches, p = shape.stages;
    auto in_range = [m](int i) { return i >= 0 && i < m; };
    Actions a;
    for (int x = 0; x < m + p - 1; ++x) {
      if (in_range(x)) a.push_back(fwd(x, 0));
      if (in_range(x - (p - 1 - rank))) a.push_back(bwd(x - (p - 1 - rank), 0));
      if (in_range(x - (p - 1))) a.push_back(weight(x - (p - 1), 0));
    }
    return a;
  }
};

}  // namespace

LOOM_PLUGIN(loom::sdk::pipeline_plugin<GPipe>(), loom::sdk::pipeline_plugin<OneFOneB>(),
            loom::sdk::pipeline_plugin<Interleaved>(), loom::sdk::pipeline_plugin<ZeroBubbleH1>())
