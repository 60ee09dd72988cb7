#include "model/params.hpp"

#include "core/errors.hpp"
#include "model/philox.hpp"

namespace loom {

const char* role_name(Role r) {
  switch (r) {
    case Role::Column:
      return "column";
    case Role::Row:
      return "row";
    case Role::Vocab:
      return "vocab";
    case Role::Replicated:
      return "replicated";
    case Role::Expert:
      return "expert";
  }
  return "?";
}

Param& ParamStore::declare(std::string name, Role role, std::vector<int64_t> global_shape,
                           Init init, bool weight_decay, Slice slice) {
  if (values_.defined()) throw RuntimeError("parameter '" + name + "' declared after allocation");
  for (const auto& p : params_)
    if (p.name == name) throw RuntimeError("parameter '" + name + "' declared twice");
  Param p;
  p.name = std::move(name);
  p.role = role;
  p.init = init;
  p.weight_decay = weight_decay;
  p.local_shape = global_shape;
  if (slice.length >= 0) p.local_shape.at(slice.dim) = slice.length * slice.fused;
  p.global_shape = std::move(global_shape);
  p.slice = slice;
  p.index = static_cast<int64_t>(params_.size());
  params_.push_back(std::move(p));
  return params_.back();
}

Param& ParamStore::get(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return p;
  throw RuntimeError("no parameter named '" + name + "'");
}

// Global flat index of local element `i` of a row-major slice along `s.dim`.
int64_t global_index(int64_t i, const std::vector<int64_t>& local,
                     const std::vector<int64_t>& global, const Slice& s) {
  int64_t g = 0, gstride = 1;
  for (int d = static_cast<int>(local.size()) - 1; d >= 0; --d) {
    int64_t coord = i % local[d];
    i /= local[d];
    if (d == s.dim && s.length >= 0)  // part p of the fused parts, entry `within` of this rank's
      coord = (coord / s.length) * (global[d] / s.fused) + s.begin + coord % s.length;
    g += coord * gstride;
    gstride *= global[d];
  }
  return g;
}

void ParamStore::allocate(uint64_t seed) {
  total_ = 0;
  for (auto& p : params_) {
    p.offset = total_;
    int64_t n = 1;
    for (int64_t d : p.local_shape) n *= d;
    total_ += (n + 15) / 16 * 16;  // 64-byte aligned views
  }
  {
    TensorPurpose purpose("the parameters");
    values_ = Tensor::empty({total_});
  }
  TensorPurpose purpose("the gradients");
  grads_ = Tensor::zeros({total_});
  std::vector<float> init(static_cast<size_t>(total_), 0.f);  // made on the host, then uploaded
  for (auto& p : params_) {
    p.value = Tensor::borrow(values_.f32() + p.offset, p.local_shape);
    p.grad = Tensor::borrow(grads_.f32() + p.offset, p.local_shape);
    float* v = init.data() + p.offset;
    int64_t n = p.value.numel();
    if (p.init.kind == Init::Ones) {
      for (int64_t i = 0; i < n; ++i) v[i] = 1.f;
    } else if (p.init.kind == Init::Normal) {
      CounterRng rng(seed, p.name);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i)
        v[i] = p.init.std * rng.normal(global_index(i, p.local_shape, p.global_shape, p.slice));
    }
  }
  upload(values_, init.data());
}

}  // namespace loom
