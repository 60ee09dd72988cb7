#include "report/doctor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace loom::report {

namespace {

class Writer {
 public:
  void section(const char* name) { text += std::string("\n") + name + "\n"; }
  void ok(const std::string& s) { text += "  ok    " + s + "\n"; }
  // Neither a pass nor a finding: a check that did not run, and why.
  void info(const std::string& s) { text += "  --    " + s + "\n"; }
  void look(const std::string& s, const std::string& next) {
    text += "  LOOK  " + s + "\n        next: " + next + "\n";
    ++findings;
  }
  std::string text;
  int findings = 0;
};

std::string g(double v, const char* f = "%.4g") {
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::vector<const EventRow*> events_of(const Run& r, const std::string& event) {
  std::vector<const EventRow*> out;
  for (const auto& e : r.events)
    if (e.event == event) out.push_back(&e);
  return out;
}

std::string headline(const Run& run) {
  std::string resumed;
  for (const EventRow* e : events_of(run, "resume"))
    resumed += (resumed.empty() ? "" : ", ") + std::to_string(e->step);
  if (!resumed.empty()) resumed = " (resumed after step " + resumed + ")";
  if (run.superseded_rows > 0)
    resumed += "; " + std::to_string(run.superseded_rows) +
               " rows of a stopped run written again by its resume are left out";
  return "loom doctor: " + run.dir.string() + ": " + std::to_string(run.steps.size()) + " steps" +
         resumed + ", " + std::to_string(run.events.size()) +
         (run.events.size() == 1 ? " event\n" : " events\n");
}

void check_data(Writer& w, const Run& run) {
  w.section("data");
  auto spikes = events_of(run, "spike");
  if (spikes.empty()) w.ok("no loss or grad-norm spikes");
  for (const auto* e : spikes)
    w.look("step " + std::to_string(e->step) + ": spike, loss " + e->field("loss") + " (z " +
               e->field("loss_z") + "), grad norm " + e->field("grad_norm") + " (z " +
               e->field("grad_norm_z") + "), update " + e->field("action"),
           "read the batch" +
               (e->field("batch_step").empty() || e->field("batch_step") == std::to_string(e->step)
                    ? std::string()
                    : " of step " + e->field("batch_step") + ", whose loss jumped first") +
               ": global samples " + e->field("samples") + " start at token offsets " +
               e->field("token_offsets") +
               (e->field("sources").empty() || e->field("sources") == "null"
                    ? " of the training split"
                    : " of the training splits of blend sources " + e->field("sources")) +
               "; per-layer grad norms " + e->field("layer_grad_norms"));
}

void check_fp8_saturation(Writer& w, const Run& run) {
  if (!(run.max("fp8_saturated_tensors") > 0)) return;
  size_t late = 0;
  for (size_t i = 1; i < run.steps.size(); ++i)
    late += run.steps[i].get("fp8_saturated_tensors") > 0;
  if (late > 1)
    w.look(std::to_string(late) + " steps after the first had fp8 tensors saturate (at most " +
               g(run.max("fp8_saturated_tensors")) + " of " + g(run.last("fp8_tensors")) + ")",
           "a growing amax outruns the delayed scale: raise [plugins.fp8] margin or shorten "
           "amax_history_len");
  else
    w.ok("fp8 saturation only while the first scales settled");
}

void check_loss_fell(Writer& w, const Run& run) {
  if (run.steps.size() < 2) return;
  const double first = run.steps.front().get("loss"), final_loss = run.last("loss");
  if (final_loss < first)
    w.ok("loss fell from " + g(first) + " to " + g(final_loss));
  else
    w.look("loss did not fall (" + g(first) + " -> " + g(final_loss) + ")",
           "learning rate, warm-up and data: is the model seeing the tokens you think?");
}

void check_numeric(Writer& w, const Run& run) {
  w.section("numeric");
  auto nonfinite = events_of(run, "nonfinite");
  if (nonfinite.empty()) w.ok("no non-finite loss or gradient");
  for (const auto* e : nonfinite)
    w.look("step " + std::to_string(e->step) + ": non-finite value, first in parameter " +
               e->field("param") + " (layer " + e->field("in_layer") + "), update " +
               e->field("action"),
           "that layer's forward inputs and weights at that step; a learning rate or init too "
           "large for it");
  auto overflows = events_of(run, "overflow_skip");
  if (!overflows.empty())
    w.look(std::to_string(overflows.size()) +
               " fp16 overflow steps skipped (loss scale at the end " + g(run.last("loss_scale")) +
               ")",
           "a few early ones are the scaler finding its level; many late ones mean values near "
           "fp16's 65504: try bf16");
  check_fp8_saturation(w, run);
  check_loss_fell(w, run);
}

// The slowest host link measured at start-up (links.json): the node to look at first; "" when
// the run has no link measurements.
std::string slowest_link(const Run& run) {
  if (run.links.empty()) return "";
  const auto* s = &run.links[0];
  for (const auto& l : run.links)
    if (l.second < s->second) s = &l;
  std::string slowest = "the slowest link to " + run.links_to + " is " + s->first + "'s, " +
                        g(s->second, "%.1f") + " MB/s at start-up";
  if (run.links.size() > 1) {
    std::vector<double> rates;
    for (const auto& l : run.links) rates.push_back(l.second);
    std::sort(rates.begin(), rates.end());
    slowest += " (median of " + std::to_string(rates.size()) +
               " hosts: " + g(rates[rates.size() / 2], "%.1f") + " MB/s)";
  }
  return slowest;
}

// "" when some step ran the check that `key` records; otherwise why it did not (`reasons`), or
// that the run predates the record.
std::string not_checked(const Run& run, const std::string& key, const std::string& reasons) {
  bool recorded = false;
  for (const auto& s : run.steps) {
    if (s.get(key) > 0) return "";
    recorded = recorded || s.has(key);
  }
  return recorded ? "no step ran it: " + reasons : "this run's metrics do not record it";
}

void check_communication(Writer& w, const Run& run) {
  w.section("communication");
  auto replicas = events_of(run, "replica_mismatch");
  if (replicas.empty()) {
    const std::string why =
        not_checked(run, "replica_check",
                    "one data-parallel rank, zero3's shards, or check_every past the last step");
    if (why.empty())
      w.ok("no data-parallel replica mismatch");
    else
      w.info("data-parallel replicas not checked (" + why + ")");
  }
  for (const auto* e : replicas)
    w.look(
        "step " + std::to_string(e->step) + ": replicas' parameters differ: " + e->field("ranks"),
        "a silently corrupted reduction or bad memory on that host; rerun without it and compare");
  const size_t n = run.steps.size();
  const double exposed = run.mean("exposed_comm_ms", n > 3 ? 2 : 0),
               step_ms = run.mean("step_ms", n > 3 ? 2 : 0);
  const std::string slowest = slowest_link(run);
  if (!(std::isfinite(exposed) && step_ms > 0)) return;
  const double share = exposed / step_ms;
  if (share > 0.25)
    w.look("communication not hidden behind compute takes " + g(100 * share, "%.0f") +
               "% of a step" + (slowest.empty() ? "" : "; " + slowest),
           slowest.empty() ? "bigger buckets ([plugins.ddp] bucket_mb), fewer tp ranks per group, "
                             "or `loom bench comm` for the link"
                           : "that node's network first (`loom bench comm` across it), then bigger "
                             "buckets or fewer tp ranks per group");
  else
    w.ok("exposed communication " + g(100 * share, "%.1f") + "% of a step" +
         (slowest.empty() ? "" : "; " + slowest));
}

// Steps from the third on (the first two warm up) that took over 3x their median.
void check_step_times(Writer& w, const Run& run) {
  std::vector<double> t;
  for (size_t i = 2; i < run.steps.size(); ++i) t.push_back(run.steps[i].get("step_ms"));
  std::vector<double> sorted = t;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::string slow;
  int count = 0;
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] > 3 * median) {
      if (++count <= 5) slow += (slow.empty() ? "" : ", ") + std::to_string(i + 3);
    }
  if (count)
    w.look(std::to_string(count) + " steps took over 3x the median " + g(median, "%.1f") +
               " ms (steps " + slow + (count > 5 ? ", ..." : "") + ")",
           "evaluation and sampling steps are expected; others point at a noisy neighbour, "
           "swapping or a slow rank");
  else
    w.ok("step time steady around " + g(median, "%.1f") + " ms");
}

void check_memory_growth(Writer& w, const Run& run) {
  const double mem0 = run.steps[2].get("mem_bytes"), mem1 = run.last("mem_bytes");
  if (mem1 > 1.2 * mem0)
    w.look("resident memory grew from " + g(mem0 / 1048576, "%.0f") + " to " +
               g(mem1 / 1048576, "%.0f") + " MiB",
           "something holds on to per-step buffers");
}

// A pipeline's stages compute for different times when the layers are split unevenly for their
// devices, or the devices differ (a mixed cluster): the busiest stage paces every micro-batch.
void check_pipeline_balance(Writer& w, const Run& run) {
  std::vector<double> stage_ms;
  const size_t from = run.steps.size() > 3 ? 2 : 0;
  for (size_t s = 0; run.steps.front().has("stage" + std::to_string(s) + "_compute_ms"); ++s)
    stage_ms.push_back(run.mean("stage" + std::to_string(s) + "_compute_ms", from));
  if (stage_ms.size() < 2) return;
  w.section("pipeline");
  const auto slow = std::max_element(stage_ms.begin(), stage_ms.end()),
             fast = std::min_element(stage_ms.begin(), stage_ms.end());
  std::string each;
  for (size_t s = 0; s < stage_ms.size(); ++s) each += (s ? ", " : "") + g(stage_ms[s], "%.1f");
  if (*fast > 0 && *slow > 1.2 * *fast)
    w.look("stage " + std::to_string(slow - stage_ms.begin()) + " computes " + g(*slow, "%.1f") +
               " ms per step, " + g(*slow / *fast, "%.2f") + "x stage " +
               std::to_string(fast - stage_ms.begin()) +
               "'s; it paces the pipeline "
               "(stages: " +
               each + " ms)",
           "move layers off it with [parallel] pp_layout; on a mixed cluster, `loom plan --cluster "
           "FILE` with the "
           "cluster's [[group]]s balances the split and --emit writes it (docs/plan.md, Mixed "
           "clusters)");
  else
    w.ok("pipeline stages compute within 20% of each other (" + each + " ms per step)");
}

void check_hardware(Writer& w, const Run& run) {
  w.section("hardware");
  auto wrong = events_of(run, "collective_mismatch");
  if (wrong.empty()) {
    const std::string why =
        not_checked(run, "collective_check", "one rank, or check_every past the last step");
    if (why.empty())
      w.ok("no check collective came out wrong");
    else
      w.info("check collective not run (" + why + ")");
  }
  for (const auto* e : wrong)
    w.look("step " + std::to_string(e->step) +
               ": a check all-reduce with a known answer was wrong on " + e->field("ranks"),
           "take that host out: memory, CPU or NIC");
  if (run.steps.size() > 5) {
    check_step_times(w, run);
    check_memory_growth(w, run);
  }
}

}  // namespace

Diagnosis diagnose(const Run& run) {
  Writer w;
  w.text = headline(run);
  check_data(w, run);
  check_numeric(w, run);
  check_communication(w, run);
  check_hardware(w, run);
  if (!run.steps.empty()) check_pipeline_balance(w, run);
  char b[96];
  std::snprintf(b, sizeof b, "\n%d finding%s\n", w.findings, w.findings == 1 ? "" : "s");
  return {w.text + b, w.findings};
}

}  // namespace loom::report
