#include "train/stability.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/errors.hpp"
#include "core/json.hpp"
#include "train/data_parallel.hpp"
#include "train/tensor_slots.hpp"

namespace loom::train {

namespace {

// (x - mean) / std over the window; 0 while the window is flat.
double zscore_of(double x, const std::deque<double>& w) {
  double mean = 0, var = 0;
  for (double v : w) mean += v;
  mean /= static_cast<double>(w.size());
  for (double v : w) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / static_cast<double>(w.size()));
  return sd > 0 ? (x - mean) / sd : 0;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// How far x lies above the recent level (the median of the last 5 values), in units of the
// window's step-to-step noise (sigma = median |difference| / 0.954 for Gaussian noise). A loss
// that falls fast early in training has a wide spread over the window, which hides a jump from
// zscore_of; its steps are small, and a bad batch stands out against them.
double jump_score(double x, const std::deque<double>& w) {
  if (w.size() < 3) return 0;
  std::vector<double> steps, recent;
  for (size_t i = 1; i < w.size(); ++i) steps.push_back(std::fabs(w[i] - w[i - 1]));
  for (size_t i = w.size() - std::min<size_t>(5, w.size()); i < w.size(); ++i)
    recent.push_back(w[i]);
  const double sigma = median(steps) / 0.954;
  return sigma > 0 ? (x - median(recent)) / sigma : 0;
}

std::string json_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

Stability::Stability(const StabilitySettings& s, dist::CommWorld* world, DataParallel* dp,
                     bool lead, const std::filesystem::path& run_dir, bool append)
    : enabled_(s.enabled),
      fail_on_nonfinite_(s.fail_on_nonfinite),
      skip_spikes_(s.skip_spikes),
      window_(s.window),
      min_steps_(s.min_steps),
      check_every_(s.check_every),
      zscore_(s.zscore),
      world_(world),
      dp_(dp),
      lead_(lead) {
  events_path_ = run_dir / "events.jsonl";
  if (lead_) events_.open(events_path_, append ? std::ios::app : std::ios::trunc);
}

void Stability::log(const Event& e) {
  if (!lead_) return;
  std::string line = "{\"step\": " + std::to_string(e.step) +
                     ", \"layer\": " + json_quote(e.layer) + ", \"event\": " + json_quote(e.event);
  for (const auto& [k, v] : e.fields) line += ", " + json_quote(k) + ": " + v;
  errno = 0;
  events_ << line << "}\n";
  events_.flush();
  if (!events_)
    throw RuntimeError("writing '" + events_path_.string() +
                       "' failed: " + (errno ? std::strerror(errno) : "I/O error"));
}

bool Stability::on_nonfinite(int64_t step, double loss, double grad_norm, const ParamStore& params,
                             bool searchable) {
  // Backward produces gradients from the last parameter to the first: the first non-finite one
  // in that order is where the bad value entered (or the loss itself, when all are).
  // Every rank is here together (found_inf is global), so the earliest bad parameter over all
  // ranks is agreed with one MIN all-reduce of its backward-order position.
  const auto& all = params.all();
  double found = static_cast<double>(all.size());
  for (size_t k = 0; searchable && k < all.size() && found == static_cast<double>(all.size());
       ++k) {
    const Param& p = all[all.size() - 1 - k];
    const float* g = p.grad.f32();
    for (int64_t i = 0; i < p.grad.numel(); ++i)
      if (!std::isfinite(g[i])) {
        found = static_cast<double>(k);
        break;
      }
  }
  if (world_) world_->world().all_reduce(flat_view(&found, LOOM_F64, 1), LOOM_REDUCE_MIN);
  const std::string first = found < static_cast<double>(all.size())
                                ? all[all.size() - 1 - static_cast<size_t>(found)].name
                                : "";
  const std::string where = !searchable ? "in the ZeRO-sharded gradients (no per-parameter search)"
                            : first.empty()
                                ? "in no gradient (the loss itself)"
                                : "first in layer " + layer_of(first) + ", parameter " + first;
  const std::string what = "step " + std::to_string(step) + ": non-finite " +
                           (std::isfinite(loss) ? "gradient" : "loss") + " (loss " +
                           std::to_string(loss) + ", grad norm " + std::to_string(grad_norm) +
                           "), " + where;
  if (!enabled_ || fail_on_nonfinite_) throw RuntimeError(what);
  if (lead_) std::printf("%s; update skipped\n", what.c_str());
  log({step,
       "numeric",
       "nonfinite",
       {{"loss", json_number(loss)},
        {"grad_norm", json_number(grad_norm)},
        {"in_layer", first.empty() ? "null" : json_quote(layer_of(first))},
        {"param", first.empty() ? "null" : json_quote(first)},
        {"action", "\"skipped\""}}});
  return true;
}

bool Stability::on_step(
    int64_t step, double loss, double grad_norm, const std::vector<int64_t>& offsets,
    const std::vector<std::string>& sources,
    const std::function<std::vector<std::pair<std::string, double>>()>& layer_norms) {
  if (!enabled_) return false;
  bool spike = false;
  double zl = 0, zg = 0;
  if (static_cast<int64_t>(losses_.size()) >= min_steps_) {
    zl = std::max(zscore_of(loss, losses_), jump_score(loss, losses_));
    zg = zscore_of(grad_norm, norms_);
    spike = zl > zscore_ || zg > zscore_;
  }
  recent_.push_back({step, zl, offsets, sources});
  if (recent_.size() > 3) recent_.pop_front();
  // A spike stays out of the window, so it does not widen the next judgement, unless it is the
  // third in a row: then the level itself has moved, and the window follows it.
  consecutive_ = spike ? consecutive_ + 1 : 0;
  if (!spike || consecutive_ >= 3) {
    losses_.push_back(loss);
    norms_.push_back(grad_norm);
    if (static_cast<int64_t>(losses_.size()) > window_) losses_.pop_front(), norms_.pop_front();
  }
  if (!spike) return false;
  // A bad batch shows in its own step's loss; its update can lift the grad norm of the steps
  // after it. So the batch named is the earliest of the last three whose loss jumped (half the
  // threshold), not always this step's.
  const Recent* cause = &recent_.back();
  for (const Recent& r : recent_)
    if (r.loss_z > zscore_ / 2) {
      cause = &r;
      break;
    }
  std::string samples = "[", layers = "{";
  for (size_t i = 0; i < cause->offsets.size(); ++i) samples += (i ? ", " : "") + std::to_string(i);
  std::string starts = json_list(cause->offsets), in_sources;
  for (const std::string& name : cause->sources)
    in_sources += (in_sources.empty() ? "[" : ", ") + json_quote(name);
  if (!in_sources.empty()) in_sources += "]";
  std::string worst;
  double worst_norm = -1;
  for (const auto& [layer, n] : layer_norms()) {
    layers += (layers.size() > 1 ? ", " : "") + json_quote(layer) + ": " + json_number(n);
    if (n > worst_norm) worst_norm = n, worst = layer;
  }
  const std::string whose =
      cause->step == step ? "Batch"
                          : "Batch of step " + std::to_string(cause->step) + ", whose loss jumped";
  if (lead_)
    std::printf(
        "step %lld: spike (loss %.4f, z %.1f; grad norm %.3f, z %.1f); largest layer grad norm: %s "
        "%.3f; "
        "%s. %s: global samples 0..%zu at token offsets %s%s%s\n",
        (long long)step, loss, zl, grad_norm, zg, worst.c_str(), worst_norm,
        skip_spikes_ ? "update skipped" : "update applied", whose.c_str(),
        cause->offsets.size() - 1, starts.c_str(), in_sources.empty() ? "" : " of blend sources ",
        in_sources.c_str());
  log({step,
       "data",
       "spike",
       {{"loss", json_number(loss)},
        {"loss_z", json_number(zl)},
        {"grad_norm", json_number(grad_norm)},
        {"grad_norm_z", json_number(zg)},
        {"batch_step", std::to_string(cause->step)},
        {"samples", samples + "]"},
        {"token_offsets", starts},
        {"sources", in_sources.empty() ? "null" : in_sources},
        {"layer_grad_norms", layers + "}"},
        {"action", skip_spikes_ ? "\"skipped\"" : "\"logged\""}}});
  return skip_spikes_;
}

void Stability::add_metrics(std::vector<std::pair<std::string, double>>& fields) const {
  fields.push_back({"replica_check", checked_replicas_ ? 1.0 : 0.0});
  fields.push_back({"collective_check", checked_collective_ ? 1.0 : 0.0});
}

// Hardware: every rank adds i mod 7 + 1; the sum n (i mod 7 + 1) is exact in fp32 up to
// 2^24 / 7 ranks.
void Stability::check_collective(int64_t step) {
  checked_collective_ = true;
  dist::Communicator& w = world_->world();
  const int n = w.size();
  std::vector<float> probe(1024);
  for (size_t i = 0; i < probe.size(); ++i) probe[i] = static_cast<float>(i % 7 + 1);
  w.all_reduce(flat_view(probe.data(), LOOM_F32, static_cast<int64_t>(probe.size())),
               LOOM_REDUCE_SUM);
  double bad = 0;
  for (size_t i = 0; i < probe.size(); ++i)
    if (probe[i] != static_cast<float>(n * (i % 7 + 1))) bad = 1;
  std::vector<double> flags(n);
  w.all_gather(flat_view(&bad, LOOM_F64, 1), flat_view(flags.data(), LOOM_F64, n));
  std::vector<int> wrong;
  for (int r = 0; r < n; ++r)
    if (flags[r] != 0) wrong.push_back(r);
  if (wrong.empty()) return;
  log({step, "hardware", "collective_mismatch", {{"ranks", "\"" + describe_ranks(wrong) + "\""}}});
  throw RuntimeError("step " + std::to_string(step) +
                     ": a check all-reduce with a known answer came out wrong on " +
                     describe_ranks(wrong) + " (suspect that host's memory, CPU or network)");
}

// Every check_every steps the collective check, and the replicas' parameters, which must be
// identical; a data plugin whose replicas diverge between syncs has them compared at every sync.
void Stability::check(int64_t step, const ParamStore& params) {
  checked_replicas_ = checked_collective_ = false;
  if (!enabled_ || check_every_ == 0 || !world_) return;
  const bool due = step % check_every_ == 0;
  const bool synced = dp_ && dp_->replicas_synced(step);  // always, unless replicas diverge
  if (due) check_collective(step);
  if (!synced || !(due || dp_->diverges()) || !dp_->has_replicas()) return;
  checked_replicas_ = true;
  std::vector<int> odd = dp_->odd_replicas(params);
  if (odd.empty()) return;
  log({step, "communication", "replica_mismatch", {{"ranks", "\"" + describe_ranks(odd) + "\""}}});
  throw RuntimeError("step " + std::to_string(step) +
                     ": data-parallel replicas' parameters differ: " + dp_->describe_mismatch(odd));
}

}  // namespace loom::train
