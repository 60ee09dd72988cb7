// The runtime's side of the comm slot: the rendezvous store as the ABI's loom_store, the comm
// plugin's world communicator, one communicator per mesh axis, and typed C++ calls that turn a
// failed status into RuntimeError.
#pragma once

#include <loom/plugin.h>

#include <memory>
#include <string>
#include <vector>

#include "distributed/device_staging.hpp"
#include "distributed/launch.hpp"
#include "distributed/mesh.hpp"
#include "distributed/store.hpp"
#include "distributed/watchdog.hpp"
#include "loader/registry.hpp"

namespace loom::dist {

class Communicator {
 public:
  // `name` is also what the comm meter files its traffic under.
  Communicator(const loom_comm_v2* table, void* self, loom_comm* c, std::string name);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return t_->rank(self_, c_); }
  int size() const { return t_->size(self_, c_); }
  loom_comm* raw() const { return c_; }

  void all_reduce(loom_tensor t, loom_reduce_op op);
  // Whether `v` holds on any rank (a collective: every rank calls it, and all get the answer).
  bool any(bool v);
  void all_gather(const loom_tensor& in, loom_tensor out);
  void barrier();
  // Point to point (pp activations): send returns at once, its buffer must stay untouched until
  // wait(); recv returns when the data is there.
  loom_work* send(const loom_tensor& t, int peer, int tag);
  void recv(loom_tensor t, int peer, int tag);
  loom_work* irecv(const loom_tensor& t, int peer, int tag);  // completes at wait()
  void wait(loom_work* work);
  // The sends and receives issued between the two start together (loom_comm_v2.group_start);
  // no-ops for a backend without groups.
  void group_start();
  void group_end();
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name);

 private:
  void check(loom_status s, const loom_error& e, const char* what) const;
  const loom_comm_v2* t_;
  void* self_;
  loom_comm* c_;
  std::string name_;
};

// Everything a rank needs to talk to the others, started in order: store, plugin, world, axes.
class CommWorld {
 public:
  CommWorld(const RankEnv& env, const MeshShape& mesh, const plugins::Found& plugin,
            const loom_options* options, int64_t timeout_ms);
  ~CommWorld();

  const RankEnv& env() const { return env_; }
  const MeshShape& mesh() const { return mesh_; }
  Coord coord() const { return coord_of(mesh_, env_.rank); }
  Communicator& world() { return *world_; }
  Communicator& axis(Axis a) { return *axes_[static_cast<int>(a)]; }
  // The dp x ep x cp ranks that split the batch (data_split); the dp axis when ep = cp = 1. With
  // ep > 1 the expert-data group (expert_data(), dp x cp) reduces the experts' gradients.
  Communicator& data() { return data_ ? *data_ : axis(Axis::DP); }
  // The dp x cp ranks that hold the same experts and everything else alike (the replicas).
  Communicator& expert_data() {
    return expert_data_ ? *expert_data_ : mesh_.ep > 1 ? axis(Axis::DP) : data();
  }
  int data_rank() const { return batch_rank() * mesh_.cp + coord().cp; }
  int data_size() const { return mesh_.dp * mesh_.ep * mesh_.cp; }
  // Which share of the global batch's sequences this rank reads: cp ranks read the same ones.
  int batch_rank() const { return coord().dp * mesh_.ep + coord().ep; }
  const loom_comm_v2* table() const { return table_; }
  void* self() const;

 private:
  RankEnv env_;
  MeshShape mesh_;
  std::unique_ptr<StoreServer> server_;  // rank 0 only
  std::unique_ptr<StoreClient> client_;
  loom_store store_{};
  std::unique_ptr<plugins::Instance> plugin_;
  loom_comm_v2 full_{};  // the plugin's table with every field (plugins::full_comm_table)
  StagedComm staged_{};  // device buffers through pinned host copies, for a host-memory backend
  WatchedComm
      watched_{};  // the plugin's table under the watchdog; what table() and self() hand out
  const loom_comm_v2* table_ = nullptr;
  std::unique_ptr<Communicator> world_;
  std::unique_ptr<Communicator> axes_[kAxes];
  std::unique_ptr<Communicator> data_;         // ep > 1 or cp > 1 only
  std::unique_ptr<Communicator> expert_data_;  // ep > 1 and cp > 1 only
};

}  // namespace loom::dist
