// The parameter store: every parameter the model declares, with its role, its global shape, the
// slice of it this rank holds, and views into one flat value buffer and one flat gradient buffer
// (so grad-norm, reduction buckets and the optimizer can each treat the model as one array).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "tensor/tensor.hpp"

namespace loom {

// How the tensor slot may split a parameter across tensor-parallel ranks.
enum class Role {
  Column,      // split dim 0 (output features of a [out, in] weight, and its bias)
  Row,         // split dim 1 (input features)
  Vocab,       // split dim 0 of an embedding table (vocabulary rows)
  Replicated,  // every rank holds all of it (norms, biases after a row-parallel layer)
  Expert       // split over expert-parallel ranks along dim 0 (experts)
};
const char* role_name(Role r);

struct Init {
  enum Kind { Normal, Zeros, Ones } kind = Zeros;
  float std = 0.f;
};

// The part of a global tensor a rank holds: dimension `dim` is seen as `fused` equal parts (a
// fused QKV weight is three matrices) and the rank holds entries [begin, begin + length) of each.
struct Slice {
  int dim = 0;
  int64_t begin = 0, length = -1;  // length -1 = the whole tensor
  int fused = 1;
};

struct Param {
  std::string name;
  Role role;
  Init init;
  bool weight_decay;  // matrices decay; norms, biases and embeddings' padding do not
  std::vector<int64_t> global_shape, local_shape;
  Slice slice;
  int64_t index = 0;   // position in declaration order
  int64_t offset = 0;  // into the flat buffers
  // A copy of a parameter another pipeline stage owns (the tied embedding on the last stage): the
  // pipeline sums its gradient with the owner's, and norms and checkpoints count the owner's.
  bool mirror = false;
  Tensor value, grad;
  // Split over tp ranks (each holds different elements; a norm sums them over tp).
  bool tp_sharded() const { return slice.length >= 0 && role != Role::Expert; }
  // Split over ep ranks by expert (replicated over tp and over the dp ranks of one ep coordinate).
  bool ep_sharded() const { return slice.length >= 0 && role == Role::Expert; }
};

// The flat index in the global tensor of element `i` of a rank's local part (`local` shape,
// `s` the slice it holds): how initialisation and checkpoints stay layout-independent.
int64_t global_index(int64_t i, const std::vector<int64_t>& local,
                     const std::vector<int64_t>& global, const Slice& s);

class ParamStore {
 public:
  // Declares a parameter; `slice` is the part this rank holds (from the tensor slot).
  Param& declare(std::string name, Role role, std::vector<int64_t> global_shape, Init init,
                 bool weight_decay, Slice slice = {});
  // Allocates the flat buffers, binds every view, and fills values from the counter RNG keyed by
  // (seed, name), indexed by the element's position in the global tensor.
  void allocate(uint64_t seed);

  // A deque: references handed out by declare() stay valid as more parameters are declared.
  std::deque<Param>& all() { return params_; }
  const std::deque<Param>& all() const { return params_; }
  Param& get(const std::string& name);
  int64_t numel() const { return total_; }
  float* values() { return values_.f32(); }
  const Tensor& value_buffer() const {
    return values_;
  }  // every value, flat (device memory on a device)
  float* grads() { return grads_.f32(); }
  void zero_grads() {
    if (grads_.defined()) grads_.zero();
  }
  // A data slot that shards model state (ZeRO) took what it keeps: the flat buffers go, and
  // each parameter's views are bound by that slot around the layer that uses them.
  void release_buffers() {
    values_ = Tensor(), grads_ = Tensor();
    for (Param& p : params_) p.value = Tensor(), p.grad = Tensor();
  }

 private:
  std::deque<Param> params_;
  Tensor values_, grads_;
  int64_t total_ = 0;
};

}  // namespace loom
