#include "precision/precision.hpp"

#include <cstddef>
#include <algorithm>
#include <cstring>

#include "core/errors.hpp"
#include "loader/host.hpp"  // loom_error

namespace loom {

Precision::Precision(const plugins::Found& found, const loom_options* options, const loom_ops* ops)
    : instance_(std::make_unique<plugins::Instance>(found, options)),
      table_(instance_->table<loom_precision_v1>()),
      ops_(ops) {
  if (!has_policy()) return;
  if (!LOOM_HAS_FIELD(ops_, loom_ops, quantize) || !ops_->quantize)
    throw RuntimeError(std::string("precision '") + name() + "' needs the op table's quantize (ABI 1.1)");
  // A format policy is all or nothing: name the entry a hand-written table left out.
  const std::pair<const void*, const char*> entries[] = {
      {reinterpret_cast<const void*>(table_->add_site), "add_site"},
      {reinterpret_cast<const void*>(table_->observe), "observe"},
      {reinterpret_cast<const void*>(table_->loss_scale), "loss_scale"},
      {reinterpret_cast<const void*>(table_->step_stats), "step_stats"},
      {reinterpret_cast<const void*>(table_->end_step), "end_step"},
      {reinterpret_cast<const void*>(table_->metrics), "metrics"},
      {reinterpret_cast<const void*>(table_->save_state), "save_state"},
      {reinterpret_cast<const void*>(table_->load_state), "load_state"}};
  for (auto [fn, entry] : entries)
    if (!fn)
      throw RuntimeError(std::string("precision plugin '") + name() + "' sets site_format but not " + entry +
                         ": an ABI 1.1 format policy must fill every entry");
}

Precision::~Precision() = default;

const char* Precision::name() const { return table_->base.name; }

// A plugin built against ABI 1.0 (or one that only rounds) has no format policy.
bool Precision::has_policy() const {
  return table_->base.v.size >= offsetof(loom_precision_v1, load_state) + sizeof(void*) &&
         table_->site_format;
}

void Precision::fail(const std::string& what) const {
  throw RuntimeError("precision plugin '" + std::string(name()) + "' failed to " + what + ": " +
                     err_.message);
}

Tensor Precision::operand(const Tensor& t, const std::string& site, loom_operand_role role) {
  if (exact()) return t;
  auto copy_of = [](const Tensor& src) {
    Tensor c = Tensor::empty(src.shape());
    std::memcpy(c.data(), src.data(), src.bytes());
    return c;
  };
  if (!has_policy()) {
    Tensor copy = copy_of(t);
    loom_tensor d = copy.desc();
    if (table_->round_operand(instance_->self(), &d, role, &err_) != LOOM_OK) fail("round a GEMM operand");
    return copy;
  }
  auto it = sites_.find(site);
  if (it == sites_.end()) {
    int32_t id = -1;
    if (table_->add_site(instance_->self(), site.c_str(), role, &id, &err_) != LOOM_OK)
      fail("register GEMM operand '" + site + "'");
    it = sites_.emplace(site, id).first;
  }
  const loom_operand_format f = table_->site_format(instance_->self(), it->second);
  if (f.dtype == LOOM_F32) return t;  // this site stays fp32: no copy
  Tensor copy = copy_of(t);
  float amax = 0;
  int64_t clipped = 0;
  ops_->quantize(copy.f32(), copy.numel(), f.dtype, f.scale, &amax, &clipped);
  table_->observe(instance_->self(), it->second, amax, clipped > 0);
  return copy;
}

double Precision::loss_scale() const {
  return has_policy() ? table_->loss_scale(instance_->self()) : 1.0;
}

bool Precision::end_step(bool found_inf, const ReduceMax& over_sharers, const ReduceMax& over_world) {
  if (!has_policy()) return false;
  float* stats = nullptr;
  int64_t n = 0;
  if (table_->step_stats(instance_->self(), &stats, &n, &err_) != LOOM_OK) fail("report its step stats");
  // The stats are per site, and only the ranks of one pipeline stage name the same sites (in the
  // same order); the overflow flag rides along with them, then goes on to the other stages, so
  // every rank decides alike even if a non-finite value stayed in one rank's unreduced gradients.
  std::vector<float> shared(stats, stats + n);
  shared.push_back(found_inf ? 1.f : 0.f);
  over_sharers(shared.data(), n + 1);
  over_world(&shared[n], 1);
  std::copy(shared.begin(), shared.begin() + n, stats);
  found_inf = shared[n] > 0.f;
  int32_t skip = 0;
  if (table_->end_step(instance_->self(), found_inf ? 1 : 0, &skip, &err_) != LOOM_OK) fail("end the step");
  return skip != 0;
}

std::vector<std::pair<std::string, double>> Precision::metrics() const {
  std::vector<std::pair<std::string, double>> out;
  if (!has_policy()) return out;
  const char* names[16];
  double values[16];
  int32_t n = table_->metrics(instance_->self(), names, values, 16);
  for (int32_t i = 0; i < n; ++i) out.push_back({names[i], values[i]});
  return out;
}

std::string Precision::save_state() const {
  if (!has_policy()) return {};
  size_t bytes = 0;
  if (table_->save_state(instance_->self(), nullptr, 0, &bytes, &err_) != LOOM_OK) fail("size its state");
  std::string out(bytes, '\0');
  if (table_->save_state(instance_->self(), out.data(), out.size(), &bytes, &err_) != LOOM_OK)
    fail("save its state");
  return out;
}

void Precision::load_state(const std::string& bytes) {
  if (!has_policy()) {
    if (!bytes.empty()) throw RuntimeError(std::string("precision '") + name() + "' keeps no state to load");
    return;
  }
  if (table_->load_state(instance_->self(), bytes.data(), bytes.size(), &err_) != LOOM_OK) fail("load its state");
}

}  // namespace loom
