#include "train/data_parallel.hpp"

#include <algorithm>
#include <climits>

#include "core/errors.hpp"
#include "loader/host.hpp"
#include "loader/services.hpp"
#include "parallel/layer_api.hpp"

namespace loom::train {

using plugins::check;

namespace {

loom_tensor scalar_f64(double* v, int64_t n = 1) { return flat_view(v, LOOM_F64, n); }

}  // namespace

// Binds each layer's parameter views to the plugin's buffers around the layer's forward and
// backward. Unit u holds the parameters layer u declared (a tied embedding is the embedding's);
// its gradients are open from the first backward that touches them until the last layer using
// them (the lowest-numbered) is done, and the plugin hears when.
class DataParallel::Shards : public model::LayerHooks {
 public:
  Shards(const loom_data_sharded_v2* table, void* self, ParamStore& params, model::Model& model,
         const std::vector<loom_data_unit>& units, const std::vector<int64_t>& unit_of_param,
         int microbatches, GradsFinal before_reduce, int stage)
      : t_(table),
        self_(self),
        units_(units),
        microbatches_(microbatches),
        before_reduce_(std::move(before_reduce)),
        stage_(stage) {
    members_.resize(units.size());
    for (Param& p : params.all()) members_[unit_of_param[p.index]].push_back(&p);
    // The lowest-numbered layer using a unit owns it (the others borrow it, as the head borrows
    // a tied embedding): acquiring it there may prefetch the next unit, and in backward its
    // gradients are final once that layer is done.
    uses_.resize(model.layer_count());
    owner_.assign(units.size(), SIZE_MAX);
    for (size_t i = 0; i < model.layer_count(); ++i) {
      for (const Param* p : model.layer_params(i)) {
        const int64_t u = unit_of_param[p->index];
        if (std::find(uses_[i].begin(), uses_[i].end(), u) == uses_[i].end()) uses_[i].push_back(u);
        owner_[u] = std::min(owner_[u], i);
      }
    }
    open_.assign(units.size(), false);
    ready_.assign(units.size(), 0);
  }

  void before_forward(size_t i) override {
    for (int64_t u : uses_[i]) bind_values(u, i, false);
  }
  void after_forward(size_t i) override {
    for (int64_t u : uses_[i]) release(u);
  }
  void before_backward(size_t i) override {
    for (int64_t u : uses_[i]) bind_values(u, i, true);
    open_grads(i);
  }
  void after_backward(size_t i) override {
    for (int64_t u : uses_[i]) release(u);
    close_grads(i);
  }
  void after_backward_input(size_t i) override {
    for (int64_t u : uses_[i]) release(u);
  }
  void before_backward_weight(size_t i) override { open_grads(i); }
  void after_backward_weight(size_t i) override { close_grads(i); }

 private:
  // A unit's gradients stay open across the backwards of layers that share it, and (split
  // backwards) from a micro-batch's input half to its weight half; a later micro-batch's input
  // half may add to the same open buffer, which is reduced whole, so each contribution still
  // passes once.
  void open_grads(size_t i) {
    for (int64_t u : uses_[i]) {
      if (open_[u]) continue;
      float* g = nullptr;
      loom_error e;
      check(t_->grad_buffer(self_, u, &g, &e), e, "data plugin grad_buffer");
      for (Param* p : members_[u])
        p->grad = Tensor::borrow(g + (p->offset - units_[u].offset), p->local_shape);
      open_[u] = true;
    }
  }
  void close_grads(size_t i) {
    for (int64_t u : uses_[i]) {
      if (owner_[u] != i) continue;
      open_[u] = false;
      const bool last =
          ++ready_[u] == microbatches_;  // every micro-batch runs each unit's backward once
      if (last) ready_[u] = 0;
      // zero1 accumulates a step's micro-batches in one buffer and reduces at the last; zero2 and
      // zero3 reduce each micro-batch's bucket. Either way each contribution passes once.
      if (before_reduce_ && (last || stage_ >= 2)) before_reduce_(members_[u]);
      loom_error e;
      check(t_->unit_grads_ready(self_, u, last, &e), e, "data plugin unit_grads_ready");
      for (Param* p : members_[u]) p->grad = Tensor();  // the bucket is the plugin's again
    }
  }
  void bind_values(int64_t u, size_t layer, bool backward) {
    float* v = nullptr;
    loom_error e;
    const int32_t flags =
        (backward ? LOOM_ACQUIRE_BACKWARD : 0) | (owner_[u] == layer ? LOOM_ACQUIRE_PREFETCH : 0);
    check(t_->acquire_params(self_, u, flags, &v, &e), e, "data plugin acquire_params");
    for (Param* p : members_[u])
      p->value = Tensor::borrow(v + (p->offset - units_[u].offset), p->local_shape);
  }
  // Views are unbound after use: a stray read fails loudly instead of reading another layer.
  void release(int64_t u) {
    loom_error e;
    check(t_->release_params(self_, u, &e), e, "data plugin release_params");
    for (Param* p : members_[u]) p->value = Tensor();
  }

  const loom_data_sharded_v2* t_;
  void* self_;
  std::vector<loom_data_unit> units_;
  int microbatches_;
  GradsFinal before_reduce_;
  int stage_;
  std::vector<std::vector<Param*>> members_;
  std::vector<std::vector<int64_t>> uses_;
  std::vector<size_t> owner_;
  std::vector<bool> open_;
  std::vector<int> ready_;
};

DataParallel::DataParallel(const plugins::Selection& sel, dist::CommWorld& world,
                           ParamStore& params, model::Model& model, int microbatches,
                           const std::vector<std::string>& own_unit, GradsFinal before_reduce)
    : world_(&world) {
  const plugins::SlotChoice* data = sel.slot("data");
  if (!data) throw RuntimeError("a data group without a data plugin got past layout_problem");
  loom_options data_opts = data->options;
  data_ = std::make_unique<plugins::Instance>(data->found, &data_opts);
  table_ = data_->table<loom_data_v2>();
  if (table_->capabilities & LOOM_DATA_SHARDED)
    sharded_ = data_->table<loom_data_sharded_v2>();
  else
    replicated_ = data_->table<loom_data_replicated_v2>();
  find_hooks();
  describe_params(params,
                  world.mesh().ep > 1);  // the plugin declares LOOM_DATA_EXPERTS (layout_problem)
  std::vector<size_t> first_user;
  find_final_layers(model, first_user);
  const std::vector<int64_t> unit_of_param = build_units(params, model, first_user, own_unit);
  start_plugin(*data, params, model);
  if (stage_ > 0) {
    shards_ =
        std::make_unique<Shards>(sharded_, data_->self(), params, model, units_, unit_of_param,
                                 microbatches, std::move(before_reduce), stage_);
    model.set_hooks(shards_.get());
    params.release_buffers();  // the plugin keeps its own copy, sharded as its stage says
  }
}

void DataParallel::describe_params(const ParamStore& params, bool ep) {
  for (const Param& p : params.all()) {
    infos_.push_back({p.name.c_str(), p.offset, p.value.numel()});
    flags_.push_back(
        (p.weight_decay ? LOOM_PARAM_DECAY : 0) | (p.tp_sharded() ? LOOM_PARAM_TP_SHARDED : 0) |
        (p.mirror ? LOOM_PARAM_MIRROR : 0) | (ep && p.ep_sharded() ? LOOM_PARAM_EXPERT : 0));
  }
}

// The lowest-numbered layer using a parameter declared it, and in backward its gradient is
// final once that layer is done.
void DataParallel::find_final_layers(model::Model& model, std::vector<size_t>& first_user) {
  first_user.assign(infos_.size(), SIZE_MAX);
  for (size_t i = 0; i < model.layer_count(); ++i)
    for (const Param* p : model.layer_params(i))
      first_user[p->index] = std::min(first_user[p->index], i);
  final_after_.assign(model.layer_count(), {});
  for (size_t p = 0; p < first_user.size(); ++p)
    if (first_user[p] != SIZE_MAX) final_after_[first_user[p]].push_back(static_cast<int64_t>(p));
}

// Units: the parameters each layer declares, a contiguous range of the flat buffers; a layer's
// experts (held per ep rank, reduced over another group) form a unit of their own, and so does
// each parameter named in `own_unit`. Returns each parameter's unit.
std::vector<int64_t> DataParallel::build_units(const ParamStore& params, model::Model& model,
                                               const std::vector<size_t>& first_user,
                                               const std::vector<std::string>& own_unit) {
  std::vector<int64_t> unit_of_param(infos_.size(), -1);
  auto alone = [&](const Param& p) {
    return std::find(own_unit.begin(), own_unit.end(), p.name) != own_unit.end();
  };
  auto end_of = [](const Param& p) { return p.offset + (p.value.numel() + 15) / 16 * 16; };
  for (size_t i = 0; i < model.layer_count(); ++i) {
    for (int expert = 0; expert < 2; ++expert) {
      auto member = [&](const Param& p) {
        return first_user[p.index] == i && !alone(p) &&
               (flags_[p.index] & LOOM_PARAM_EXPERT ? 1 : 0) == expert;
      };
      int64_t lo = INT64_MAX, hi = -1, inside = 0;
      for (const Param& p : params.all()) {
        if (first_user[p.index] == i && alone(p) && expert == 0) {
          unit_of_param[p.index] = static_cast<int64_t>(units_.size());
          units_.push_back({p.offset, end_of(p) - p.offset});
          expert_unit_.push_back(false);
        } else if (member(p)) {
          lo = std::min(lo, p.offset), hi = std::max(hi, end_of(p)), inside += end_of(p) - p.offset;
        }
      }
      if (hi < 0) continue;
      if (inside != hi - lo)
        throw RuntimeError("layer " + model.layer_name(i) + ": its " +
                           (expert ? "expert" : "other") +
                           " parameters are not contiguous in the flat buffer");
      for (const Param& p : params.all())
        if (member(p)) unit_of_param[p.index] = static_cast<int64_t>(units_.size());
      units_.push_back({lo, hi - lo});
      expert_unit_.push_back(expert == 1);
    }
  }
  return unit_of_param;
}

void DataParallel::start_plugin(const plugins::SlotChoice& data, ParamStore& params,
                                model::Model& model) {
  const bool ep = world_->mesh().ep > 1;
  loom_data_context ctx{};
  ctx.v = LOOM_VERSION_OF(loom_data_context);
  ctx.comm = world_->table();
  ctx.comm_self = world_->self();
  ctx.dp = world_->data().raw();
  ctx.values = params.values();
  ctx.grads = params.grads();
  ctx.numel = params.numel();
  ctx.params = infos_.data();
  ctx.n_params = static_cast<int64_t>(infos_.size());
  ctx.units = units_.data();
  ctx.n_units = static_cast<int64_t>(units_.size());
  ctx.param_flags = flags_.data();
  ctx.ops = plugins::ops_for(data_->desc(), model.api().ops());
  ctx.expert_dp = ep ? world_->expert_data().raw() : nullptr;
  loom_error e;
  check(table_->setup(data_->self(), &ctx, &e), e, "data plugin setup");
  if (!sharded_) return;
  stage_ = sharded_->stage(data_->self());
  if (stage_ < 1 || stage_ > 3)
    throw RuntimeError("[plugins] data = \"" + std::string(data.found.desc->name) +
                       "\" is a sharded data plugin whose stage() is " + std::to_string(stage_) +
                       "; a sharded plugin's stage is 1, 2 or 3");
}

DataParallel::~DataParallel() = default;

std::pair<double, double> DataParallel::sum_squares(int which) {
  double parts[2] = {0, 0};
  loom_error e;
  check(sharded_->sum_squares(data_->self(), which, parts, &e), e, "data plugin sum_squares");
  world_->data().all_reduce(scalar_f64(parts, 2), LOOM_REDUCE_SUM);  // the shards are disjoint
  return {parts[0], parts[1]};
}

void DataParallel::step(const loom_adamw& hp) {
  loom_error e;
  check(sharded_->step(data_->self(), &hp, &e), e,
        "rank " + std::to_string(world_->env().rank) + ": data plugin step");
}

std::vector<loom_shard_piece> DataParallel::shard_pieces() {
  int64_t n = 0;
  loom_error e;
  check(sharded_->shard_pieces(data_->self(), nullptr, 0, &n, &e), e, "data plugin shard_pieces");
  std::vector<loom_shard_piece> out(n);
  check(sharded_->shard_pieces(data_->self(), out.data(), n, &n, &e), e,
        "data plugin shard_pieces");
  return out;
}

void DataParallel::pieces_loaded() {
  loom_error e;
  check(sharded_->pieces_loaded(data_->self(), &e), e, "data plugin pieces_loaded");
}

bool DataParallel::has_state() const { return table_->save_state && table_->load_state; }

std::string DataParallel::save_state() {
  loom_error e;
  size_t n = 0;
  check(table_->save_state(data_->self(), nullptr, 0, &n, &e), e, "data plugin save_state");
  std::string bytes(n, '\0');
  if (n > 0)
    check(table_->save_state(data_->self(), bytes.data(), n, &n, &e), e, "data plugin save_state");
  bytes.resize(n);
  return bytes;
}

void DataParallel::load_state(const std::string& bytes) {
  loom_error e;
  check(table_->load_state(data_->self(), bytes.data(), bytes.size(), &e), e,
        "data plugin load_state");
}

std::vector<int64_t> DataParallel::accounting() {
  std::vector<int64_t> out(5, 0);
  loom_error e;
  check(table_->accounting(data_->self(), out.data(), &e), e, "data plugin accounting");
  return out;
}

int DataParallel::data_rank() const { return world_->data_rank(); }
int DataParallel::data_size() const { return world_->data_size(); }

void DataParallel::after_layer(size_t i) {
  if (!replicated_) return;  // a sharded plugin hears per unit, through the layer hooks
  for (int64_t p : final_after_[i]) {
    loom_error e;
    check(replicated_->grad_ready(data_->self(), p, &e), e, "data plugin grad_ready");
  }
}

std::pair<double, double> DataParallel::finish() {
  double comm = 0, exposed = 0;
  loom_error e;
  check(table_->finish_grads(data_->self(), &comm, &exposed, &e), e,
        "rank " + std::to_string(world_->env().rank) + ": gradient reduction");
  return {comm, exposed};
}

double DataParallel::mean_over_data(double v) {
  world_->data().all_reduce(scalar_f64(&v), LOOM_REDUCE_SUM);
  return v / data_size();
}

// Position-weighted sum in double: equal buffers give equal bits, and a swapped pair does not
// cancel out. Each rank's checksum and world rank are gathered over a group; the ranks outside
// the largest set of equal checksums are the odd ones (with two replicas that disagree, both).
// Everything is replicated over the dp ranks; under ep the non-expert parameters are replicated
// over the whole data group too, so they are compared there as well.
std::vector<int> DataParallel::odd_replicas(const ParamStore& params) {
  if (!has_replicas()) return {};  // each rank holds its own shard: there is no replica to compare
  std::vector<int> odd = odd_in(world_->expert_data(), checksum(params, false));
  if (world_->mesh().ep > 1)
    for (int r : odd_in(world_->data(), checksum(params, true)))
      if (std::find(odd.begin(), odd.end(), r) == odd.end()) odd.push_back(r);
  return odd;
}

// Over the flat buffer, or under ZeRO-1/2 over the plugin's whole parameters, unit by unit
// (the same offsets, so the same sum for the same values).
double DataParallel::checksum(const ParamStore& params, bool dense_only) {
  auto add = [](double& sum, const float* v, int64_t offset, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      sum += static_cast<double>(v[i]) * static_cast<double>((offset + i) % 9973 + 1);
  };
  double sum = 0;
  if (!sharded()) {
    const std::vector<float> values = to_host(params.value_buffer());
    for (const Param& p : params.all())
      if (!dense_only || !p.ep_sharded())
        add(sum, values.data() + p.offset, p.offset, p.value.numel());
    return sum;
  }
  std::vector<float> host;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (dense_only && expert_unit_[u]) continue;
    host.resize(static_cast<size_t>(units_[u].numel));
    with_unit_values(static_cast<int64_t>(u),
                     [&](float* v) { copy_bytes(host.data(), v, 4 * host.size()); });
    add(sum, host.data(), units_[u].offset, units_[u].numel);
  }
  return sum;
}

void DataParallel::nudge_replica(float delta) {
  if (stage_ >= 3)
    throw RuntimeError("zero3 holds each parameter once over dp: there is no replica to nudge");
  with_unit_values(0, [delta](float* v) {  // the plugin's memory may be the device's
    float first = 0;
    copy_bytes(&first, v, sizeof first);
    first += delta;
    copy_bytes(v, &first, sizeof first);
  });
}

// The plugin's whole values of unit u (zero1/2: the replica it keeps), acquired for `use`: device
// memory on a device, reached with copy_bytes.
void DataParallel::with_unit_values(int64_t u, const std::function<void(float*)>& use) {
  float* v = nullptr;
  loom_error e;
  check(sharded_->acquire_params(data_->self(), u, 0, &v, &e), e, "data plugin acquire_params");
  use(v);
  check(sharded_->release_params(data_->self(), u, &e), e, "data plugin release_params");
}

std::vector<int> DataParallel::odd_in(dist::Communicator& group, double checksum) {
  double mine[2] = {checksum, static_cast<double>(world_->env().rank)};
  std::vector<double> all(2 * group.size());
  group.all_gather(scalar_f64(mine, 2), scalar_f64(all.data(), all.size()));
  double majority = all[0];
  size_t best = 0;
  for (int r = 0; r < group.size(); ++r) {
    size_t same = 0;
    for (int q = 0; q < group.size(); ++q) same += all[2 * q] == all[2 * r];
    if (same > best) best = same, majority = all[2 * r];
  }
  std::vector<int> odd;
  const bool tie =
      2 * best <= static_cast<size_t>(group.size()) && best < static_cast<size_t>(group.size());
  for (int r = 0; r < group.size(); ++r)
    if (tie || all[2 * r] != majority) odd.push_back(static_cast<int>(all[2 * r + 1]));
  return odd;
}

std::string describe_ranks(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? (i + 1 == ranks.size() ? " and " : ", ") : "") + std::to_string(ranks[i]);
  return s;
}

void DataParallel::check_identical(const ParamStore& params, const std::string& when) {
  std::vector<int> odd = odd_replicas(params);
  if (!odd.empty())
    throw RuntimeError("data-parallel replicas' parameters differ " + when + ": " +
                       describe_mismatch(odd));
}

// An ABI 3 plugin's hooks, by name through get_proc; LOOM_DATA_DIVERGES needs replicas_synced.
void DataParallel::find_hooks() {
  const loom_plugin* d = data_->desc();
  if (replicated_ && d->v.major >= 3 && d->get_proc)
    hooks_ = static_cast<const loom_data_hooks*>(d->get_proc(LOOM_DATA_HOOKS));
  if (!diverges()) return;
  if (sharded_)
    throw ConfigError("data plugin '" + name() +
                      "' declares LOOM_DATA_DIVERGES and LOOM_DATA_SHARDED: replicas that "
                      "diverge must be whole, so a diverging plugin is replicated");
  if (!hooks_ || !hooks_->replicas_synced)
    throw ConfigError("data plugin '" + name() +
                      "' declares LOOM_DATA_DIVERGES without LOOM_DATA_HOOKS' replicas_synced: "
                      "the runtime cannot tell when its replicas should be equal");
}

void DataParallel::before_forward() {
  if (!hooks_ || !hooks_->before_forward) return;
  loom_error e;
  check(hooks_->before_forward(data_->self(), &plugins::step_now(), &e), e,
        "data plugin before_forward");
}

void DataParallel::after_update(bool updated, float* adam_m, float* adam_v, int64_t numel) {
  if (!hooks_ || !hooks_->after_update) return;
  const loom_optimizer_state o{LOOM_VERSION_OF(loom_optimizer_state), adam_m, adam_v, numel};
  loom_error e;
  check(hooks_->after_update(data_->self(), &plugins::step_now(), updated ? 1 : 0, &o, &e), e,
        "data plugin after_update");
}

bool DataParallel::replicas_synced(int64_t step) const {
  return !diverges() || step == 0 || hooks_->replicas_synced(data_->self(), step) != 0;
}

std::string DataParallel::describe_mismatch(const std::vector<int>& odd) const {
  return describe_ranks(odd) +
         (odd.size() == 1 ? " differs from the other replicas" : " disagree") +
         "; the data plugin '" + name() + "' keeps them equal after every " +
         (diverges() ? "sync step" : "step") +
         ", so suspect a corrupted reduction or a bad host, or "
         "that plugin ([stability] check_every = 0 turns the comparison off)";
}

}  // namespace loom::train
