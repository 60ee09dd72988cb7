#include "distributed/comm.hpp"

#include <cstring>

#include "core/errors.hpp"
#include "distributed/comm_meter.hpp"
#include "loader/host.hpp"
#include "tensor/tensor.hpp"

namespace loom::dist {

namespace {

// loom_store over a StoreClient. get's bytes live in a thread-local buffer until the next get.
loom_status store_set(void* self, const char* key, const void* data, size_t n, loom_error* err) {
  try {
    static_cast<StoreClient*>(self)->set(
        key, Bytes(static_cast<const char*>(data), static_cast<const char*>(data) + n));
    return LOOM_OK;
  } catch (const std::exception& e) {
    return plugins::host().set_error(err, LOOM_SYSTEM, e.what());
  }
}

loom_status store_get(void* self, const char* key, const void** data, size_t* n, loom_error* err) {
  thread_local Bytes last;
  try {
    last = static_cast<StoreClient*>(self)->get(key);
    *data = last.data();
    *n = last.size();
    return LOOM_OK;
  } catch (const std::exception& e) {
    return plugins::host().set_error(err, LOOM_SYSTEM, e.what());
  }
}

loom_status store_add(void* self, const char* key, int64_t delta, int64_t* value, loom_error* err) {
  try {
    *value = static_cast<StoreClient*>(self)->add(key, delta);
    return LOOM_OK;
  } catch (const std::exception& e) {
    return plugins::host().set_error(err, LOOM_SYSTEM, e.what());
  }
}

}  // namespace

Communicator::~Communicator() {
  if (c_) t_->free_comm(self_, c_);
}

void Communicator::check(loom_status s, const loom_error& e, const char* what) const {
  if (s != LOOM_OK)
    throw RuntimeError(std::string(what) + " on the " + name_ + " group failed: " + e.message);
}

void Communicator::all_reduce(loom_tensor t, loom_reduce_op op) {
  loom_error e;
  check(t_->all_reduce(self_, c_, &t, op, nullptr, &e), e, "all_reduce");
}

bool Communicator::any(bool v) {
  double flag = v ? 1.0 : 0.0;
  all_reduce(flat_view(&flag, LOOM_F64, 1), LOOM_REDUCE_MAX);
  return flag > 0;
}

void Communicator::all_gather(const loom_tensor& in, loom_tensor out) {
  loom_error e;
  check(t_->all_gather(self_, c_, &in, &out, nullptr, &e), e, "all_gather");
}

loom_work* Communicator::send(const loom_tensor& t, int peer, int tag) {
  loom_error e;
  loom_work* w = nullptr;
  check(t_->send(self_, c_, &t, peer, tag, &w, &e), e,
        ("send to " + name_ + " rank " + std::to_string(peer)).c_str());
  return w;
}

void Communicator::recv(loom_tensor t, int peer, int tag) {
  loom_error e;
  check(t_->recv(self_, c_, &t, peer, tag, nullptr, &e), e,
        ("recv from " + name_ + " rank " + std::to_string(peer)).c_str());
}

loom_work* Communicator::irecv(const loom_tensor& t, int peer, int tag) {
  loom_error e;
  loom_work* w = nullptr;
  loom_tensor buf = t;
  check(t_->recv(self_, c_, &buf, peer, tag, &w, &e), e,
        ("recv from " + name_ + " rank " + std::to_string(peer)).c_str());
  return w;
}

void Communicator::wait(loom_work* work) {
  loom_error e;
  if (work) check(t_->wait(self_, work, &e), e, "wait");
}

void Communicator::group_start() {
  loom_error e;
  if (t_->group_start) check(t_->group_start(self_, c_, &e), e, "group start");
}

void Communicator::group_end() {
  loom_error e;
  if (t_->group_end) check(t_->group_end(self_, c_, &e), e, "group end");
}

void Communicator::barrier() {
  loom_error e;
  check(t_->barrier(self_, c_, &e), e, "barrier");
}

Communicator::Communicator(const loom_comm_v2* table, void* self, loom_comm* c, std::string name)
    : t_(table), self_(self), c_(c), name_(std::move(name)) {
  meter_name(c_, name_);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) {
  loom_error e;
  loom_comm* out = nullptr;
  check(t_->split(self_, c_, color, key, &out, &e), e, "split");
  return std::make_unique<Communicator>(t_, self_, out, name);
}

CommWorld::CommWorld(const RankEnv& env, const MeshShape& mesh, const plugins::Found& plugin,
                     const loom_options* options, int64_t timeout_ms)
    : env_(env), mesh_(mesh) {
  if (plugin.desc->kind != LOOM_KIND_COMM)
    throw ConfigError("[plugins] comm names '" + std::string(plugin.desc->name) +
                      "', not a comm plugin");
  if (env_.rank == 0) {
    int fd = inherited_store_fd();
    server_ = fd >= 0 ? std::make_unique<StoreServer>(fd)
                      : std::make_unique<StoreServer>("0.0.0.0", env_.master_port);
  }
  client_ = std::make_unique<StoreClient>(env_.master_addr, env_.master_port,
                                          std::chrono::milliseconds(timeout_ms));
  store_.v = LOOM_VERSION_OF(loom_store);
  store_.self = client_.get();
  store_.set = &store_set;
  store_.get = &store_get;
  store_.add = &store_add;
  store_.timeout_ms = timeout_ms;

  plugin_ = std::make_unique<plugins::Instance>(plugin, options);
  meter_training_thread();  // this thread trains: its waits are the exposed communication
  full_ = plugins::full_comm_table(plugin_->table<loom_comm_v2>());
  const loom_comm_v2* backend = &full_;
  void* backend_self = plugin_->self();
  // A host-memory backend on a device the host cannot reach: its buffers go through pinned copies.
  const loom_ops_v2* device = tensor_allocator().ops;
  if (device && !device->host_reachable && !comm_takes_device(*plugin.desc, device->device)) {
    stage_comm(staged_, backend, backend_self, device);
    backend = &staged_.table;
    backend_self = &staged_;
  }
  watch_comm(watched_, backend, backend_self, env_.rank, timeout_ms + 5000);
  table_ = &watched_.table;
  loom_error e;
  loom_comm* world = nullptr;
  loom_status st = table_->init(self(), &store_, env_.rank, env_.world, timeout_ms, &world, &e);
  if (st == LOOM_BAD_CONFIG)
    throw ConfigError("comm plugin '" + std::string(plugin.desc->name) + "': " + e.message);
  if (st != LOOM_OK)
    throw RuntimeError("comm plugin '" + std::string(plugin.desc->name) +
                       "' could not start rank " + std::to_string(env_.rank) + " of " +
                       std::to_string(env_.world) + ": " + e.message);
  world_ = std::make_unique<Communicator>(table_, self(), world, "world");
  for (Axis a : {Axis::TP, Axis::CP, Axis::EP, Axis::DP, Axis::PP}) {
    Split s = split_for(mesh_, env_.rank, a);
    axes_[static_cast<int>(a)] = world_->split(s.color, s.key, axis_name(a));
  }
  if (mesh_.ep > 1 || mesh_.cp > 1) {
    Split s = data_split(mesh_, env_.rank);
    data_ = world_->split(s.color, s.key, "data");
  }
  if (mesh_.ep > 1 && mesh_.cp > 1) {
    Split s = expert_data_split(mesh_, env_.rank);
    expert_data_ = world_->split(s.color, s.key, "expert data");
  }
}

CommWorld::~CommWorld() {
  expert_data_.reset();
  data_.reset();
  for (auto& a : axes_) a.reset();
  world_.reset();
  plugin_.reset();
}

void* CommWorld::self() const { return const_cast<WatchedComm*>(&watched_); }

}  // namespace loom::dist
