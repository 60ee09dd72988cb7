#include "precision/precision.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "core/errors.hpp"
#include "loader/host.hpp"  // loom_error

namespace loom {

Precision::Precision(const plugins::Found& found, const loom_options* options,
                     const loom_ops_v2* ops)
    : instance_(std::make_unique<plugins::Instance>(found, options)),
      table_(instance_->table<loom_precision_v2>()),
      ops_(ops),
      narrow_bf16_(LOOM_HAS_FIELD(ops, loom_ops_v2, gemm_typed) && ops->gemm_typed &&
                   ops->quantize_into),
      native_bf16_(narrow_bf16_ && (ops->gemm_operand_dtypes & (1u << LOOM_BF16))) {
  if (!exact() && (!LOOM_HAS_FIELD(ops_, loom_ops_v2, quantize) || !ops_->quantize))
    throw RuntimeError(std::string("precision '") + name() + "' needs the op table's quantize");
}

Precision::~Precision() = default;

const char* Precision::name() const { return table_->base.name; }

void Precision::fail(const std::string& what) const {
  throw RuntimeError("precision plugin '" + std::string(name()) + "' failed to " + what + ": " +
                     err_.message);
}

int32_t Precision::site_id(const std::string& site, loom_operand_role role) {
  auto it = sites_.find(site);
  if (it == sites_.end()) {
    int32_t id = -1;
    if (table_->add_site(instance_->self(), site.c_str(), role, &id, &err_) != LOOM_OK)
      fail("register GEMM operand '" + site + "'");
    it = sites_.emplace(site, id).first;
  }
  return it->second;
}

namespace {
bool plain(const loom_operand_format& f) { return f.dtype == LOOM_BF16 && f.scale == 1.f; }
}  // namespace

bool Precision::real_bf16(const loom_operand_format& f) const { return plain(f) && narrow_bf16_; }

loom_dtype Precision::storage_dtype(const std::string& site, loom_operand_role role) {
  return plain_bf16(site, role) && narrow_bf16_ ? LOOM_BF16 : LOOM_F32;
}

bool Precision::plain_bf16(const std::string& site, loom_operand_role role) {
  if (exact() || compute_dtype() != LOOM_BF16) return false;
  // Registered here on every device, so the sites' order (the plugin's per-site stats, reduced
  // across ranks, and its saved state follow it) does not depend on the hardware.
  const int32_t id = site_id(site, role);
  // A plugin that observes each operand's amax keeps seeing every GEMM's cast.
  if (table_->observe) return false;
  return plain(table_->site_format(instance_->self(), id));
}

// amax and the clip count go only to observe: a plugin without it (bf16) is spared the pass
// and, off the CPU, the host's wait for them.
void Precision::cast_bf16(int32_t id, const Tensor& t, Tensor& dst) {
  float amax = 0, *want_amax = table_->observe ? &amax : nullptr;
  int64_t clipped = 0, *want_clipped = table_->observe ? &clipped : nullptr;
  ops_->quantize_into(dst.data(), LOOM_BF16, t.f32(), t.numel(), 1.f, want_amax, want_clipped);
  if (table_->observe) table_->observe(instance_->self(), id, amax, clipped > 0);
}

void Precision::store(const Tensor& t, const std::string& site, loom_operand_role role,
                      Tensor& dst) {
  if (dst.dtype() != LOOM_BF16 || t.dtype() != LOOM_F32 || dst.numel() != t.numel())
    throw RuntimeError("storing GEMM operand '" + site + "': a bf16 tensor of " +
                       std::to_string(t.numel()) + " elements must take fp32 values");
  cast_bf16(site_id(site, role), t, dst);
}

// The plugin picks the format of each site; the op table casts (or, for LOOM_FORMAT_PLUGIN, the
// plugin rounds the copy itself).
Tensor Precision::operand(const Tensor& t, const std::string& site, loom_operand_role role) {
  if (exact()) return t;
  const int32_t id = site_id(site, role);
  const loom_operand_format f = table_->site_format(instance_->self(), id);
  if (t.dtype() == LOOM_BF16) {
    if (real_bf16(f)) return t;  // cast (and observed) once, when store() wrote it
    // The site's format changed since: its values, widened, are the operand to cast.
    Tensor wide = Tensor::empty(t.shape());
    ops_->from_bf16(wide.f32(), static_cast<const uint16_t*>(t.data()), t.numel());
    return f.dtype == LOOM_F32 ? wide : operand(wide, site, role);
  }
  if (f.dtype == LOOM_F32) return t;  // this site stays fp32: no copy
  if (real_bf16(f)) {
    Tensor narrow = Tensor::empty(t.shape(), LOOM_BF16);
    cast_bf16(id, t, narrow);
    return narrow;
  }
  float amax = 0, *want_amax = table_->observe ? &amax : nullptr;
  int64_t clipped = 0, *want_clipped = table_->observe ? &clipped : nullptr;
  Tensor copy = Tensor::empty(t.shape());
  copy_bytes(copy.data(), t.data(), t.bytes());
  if (f.dtype == LOOM_FORMAT_PLUGIN) {
    if (!table_->round_site)
      fail("round operand '" + site +
           "' (its format is LOOM_FORMAT_PLUGIN, and round_site is NULL)");
    loom_tensor d = copy.desc();
    if (table_->round_site(instance_->self(), id, &d, &err_) != LOOM_OK)
      fail("round GEMM operand '" + site + "'");
    return copy;
  }
  ops_->quantize(copy.f32(), copy.numel(), f.dtype, f.scale, want_amax, want_clipped);
  if (table_->observe) table_->observe(instance_->self(), id, amax, clipped > 0);
  return copy;
}

double Precision::loss_scale() const {
  return table_->loss_scale ? table_->loss_scale(instance_->self()) : 1.0;
}

bool Precision::end_step(bool found_inf, const ReduceMax& over_sharers,
                         const ReduceMax& over_world) {
  float* stats = nullptr;
  int64_t n = 0;
  if (table_->step_stats && table_->step_stats(instance_->self(), &stats, &n, &err_) != LOOM_OK)
    fail("report its step stats");
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
  if (table_->end_step &&
      table_->end_step(instance_->self(), found_inf ? 1 : 0, &skip, &err_) != LOOM_OK)
    fail("end the step");
  return skip != 0;
}

std::vector<std::pair<std::string, double>> Precision::metrics() const {
  std::vector<std::pair<std::string, double>> out;
  if (!table_->metrics) return out;
  const char* names[16];
  double values[16];
  int32_t n = table_->metrics(instance_->self(), names, values, 16);
  for (int32_t i = 0; i < n; ++i) out.push_back({names[i], values[i]});
  return out;
}

std::string Precision::save_state() const {
  if (!table_->save_state) return {};
  size_t bytes = 0;
  if (table_->save_state(instance_->self(), nullptr, 0, &bytes, &err_) != LOOM_OK)
    fail("size its state");
  std::string out(bytes, '\0');
  if (table_->save_state(instance_->self(), out.data(), out.size(), &bytes, &err_) != LOOM_OK)
    fail("save its state");
  return out;
}

void Precision::load_state(const std::string& bytes) {
  if (!table_->load_state) {
    if (!bytes.empty())
      throw RuntimeError(std::string("precision '") + name() + "' keeps no state to load");
    return;
  }
  if (table_->load_state(instance_->self(), bytes.data(), bytes.size(), &err_) != LOOM_OK)
    fail("load its state");
}

void operand_gemm(const loom_ops_v2& ops, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb,
                  float beta, float* C, int64_t ldc) {
  if (A.dtype() == LOOM_F32 && B.dtype() == LOOM_F32)
    return ops.gemm(trans_a, trans_b, M, N, K, alpha, A.f32(), lda, B.f32(), ldb, beta, C, ldc);
  ops.gemm_typed(trans_a, trans_b, M, N, K, alpha, A.data(), A.dtype(), lda, B.data(), B.dtype(),
                 ldb, beta, C, ldc);
}

}  // namespace loom
