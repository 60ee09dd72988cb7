#include "train/data_parallel.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "loader/host.hpp"

namespace loom::train {

namespace {

loom_tensor scalar_f64(double* v, int64_t n = 1) { return flat_view(v, LOOM_F64, n); }

void check(loom_status s, const loom_error& e, const std::string& what) {
  if (s == LOOM_BAD_CONFIG) throw ConfigError(what + ": " + e.message);
  if (s != LOOM_OK) throw RuntimeError(what + ": " + e.message);
}

}  // namespace

DataParallel::DataParallel(const config::Config& cfg, const plugins::Selection& sel,
                           dist::CommWorld& world, ParamStore& params, gpt::Gpt& model)
    : world_(&world) {
  const plugins::SlotChoice* data = sel.slot("data");
  if (!data)
    throw ConfigError("dp = " + std::to_string(world.mesh().dp) + " needs [plugins] data (e.g. \"ddp\")");

  loom_options data_opts = plugins::options_for(cfg, data->found.desc->name);
  data_ = std::make_unique<plugins::Instance>(data->found, &data_opts);
  table_ = data_->table<loom_data_v1>();

  for (const Param& p : params.all())
    infos_.push_back({p.name.c_str(), p.offset, p.value.numel()});
  // A gradient is final after the lowest-numbered layer that uses it has run backward.
  std::vector<size_t> last_user(infos_.size(), SIZE_MAX);
  for (size_t i = 0; i < model.layers().size(); ++i)
    for (const Param* p : model.layers()[i]->params())
      last_user[p->index] = std::min(last_user[p->index], i);
  final_after_.assign(model.layers().size(), {});
  for (size_t p = 0; p < last_user.size(); ++p)
    if (last_user[p] != SIZE_MAX) final_after_[last_user[p]].push_back(static_cast<int64_t>(p));

  loom_data_context ctx{};
  ctx.v = LOOM_VERSION_OF(loom_data_context);
  ctx.comm = world_->table();
  ctx.comm_self = world_->self();
  ctx.dp = world_->axis(dist::Axis::DP).raw();
  ctx.values = params.values();
  ctx.grads = params.grads();
  ctx.numel = params.numel();
  ctx.params = infos_.data();
  ctx.n_params = static_cast<int64_t>(infos_.size());
  loom_error e;
  check(table_->setup(data_->self(), &ctx, &e), e, "data plugin setup");
}

DataParallel::~DataParallel() = default;

int DataParallel::dp_rank() const { return world_->coord().dp; }
int DataParallel::dp_size() const { return world_->mesh().dp; }

void DataParallel::after_layer(size_t i) {
  for (int64_t p : final_after_[i]) {
    loom_error e;
    check(table_->grad_ready(data_->self(), p, &e), e, "data plugin grad_ready");
  }
}

std::pair<double, double> DataParallel::finish() {
  double comm = 0, exposed = 0;
  loom_error e;
  check(table_->finish_grads(data_->self(), &comm, &exposed, &e), e,
        "rank " + std::to_string(world_->env().rank) + ": gradient reduction");
  return {comm, exposed};
}

double DataParallel::mean_over_dp(double v) {
  world_->axis(dist::Axis::DP).all_reduce(scalar_f64(&v), LOOM_REDUCE_SUM);
  return v / dp_size();
}

// Position-weighted sum in double: equal buffers give equal bits, and a swapped pair does not
// cancel out. Each dp rank's checksum and world rank are gathered; the replicas outside the
// largest group of equal checksums are the odd ones (with two replicas that disagree, both).
std::vector<int> DataParallel::odd_replicas(const ParamStore& params) {
  double mine[2] = {0, static_cast<double>(world_->env().rank)};
  const float* v = const_cast<ParamStore&>(params).values();
  for (int64_t i = 0; i < params.numel(); ++i) mine[0] += static_cast<double>(v[i]) * static_cast<double>(i % 9973 + 1);
  dist::Communicator& w = world_->axis(dist::Axis::DP);
  std::vector<double> all(2 * w.size());
  w.all_gather(scalar_f64(mine, 2), scalar_f64(all.data(), all.size()));
  double majority = all[0];
  size_t best = 0;
  for (int r = 0; r < w.size(); ++r) {
    size_t same = 0;
    for (int q = 0; q < w.size(); ++q) same += all[2 * q] == all[2 * r];
    if (same > best) best = same, majority = all[2 * r];
  }
  std::vector<int> odd;
  const bool tie = 2 * best <= static_cast<size_t>(w.size()) && best < static_cast<size_t>(w.size());
  for (int r = 0; r < w.size(); ++r)
    if (tie || all[2 * r] != majority) odd.push_back(static_cast<int>(all[2 * r + 1]));
  return odd;
}

std::string describe_ranks(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? (i + 1 == ranks.size() ? " and " : ", ") : "") + std::to_string(ranks[i]);
  return s;
}

void DataParallel::check_identical(const ParamStore& params, const std::string& when) {
  std::vector<int> odd = odd_replicas(params);
  if (!odd.empty())
    throw RuntimeError("data-parallel replicas' parameters differ " + when + ": " + describe_ranks(odd) +
                       (odd.size() == 1 ? " differs from the other replicas" : " disagree"));
}

}  // namespace loom::train
