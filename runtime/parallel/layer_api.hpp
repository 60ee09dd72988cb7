// The parallel layer API: what the model calls instead of raw kernels wherever a parallel
// strategy could change the meaning. The model declares each parameter with a role and calls
// region_enter / linear / region_exit / embedding / cross_entropy; the tensor and sequence slots
// decide what those do. This base class is the built-in degree-1 behaviour (dense layers on one
// rank, every region boundary the identity).
#pragma once

#include <vector>

#include <loom/plugin.h>

#include "model/params.hpp"
#include "tensor/tensor.hpp"

namespace loom {

// The precision slot's say over GEMM operands (NULL table = exact fp32).
struct GemmNumerics {
  const loom_precision_v1* table = nullptr;
  void* self = nullptr;
  bool exact() const { return !table || table->exact; }
  // Rounds a copy of `t` for use as an operand; returns `t` itself when exact.
  Tensor round(const Tensor& t, loom_operand_role role) const;
};

class LayerApi {
 public:
  LayerApi(const loom_ops* ops, GemmNumerics numerics = {}) : ops_(ops), numerics_(numerics) {}
  virtual ~LayerApi() = default;
  const loom_ops* ops() const { return ops_; }

  // The part of a parameter this rank holds, given its role and global shape.
  virtual Slice shard(Role role, const std::vector<int64_t>& global_shape) const;
  // Megatron's f (enter) and g (exit) around a column-parallel ... row-parallel pair.
  virtual Tensor region_enter(const Tensor& h) { return h; }
  virtual Tensor region_enter_bwd(const Tensor& dh) { return dh; }
  virtual Tensor region_exit(const Tensor& y) { return y; }
  virtual Tensor region_exit_bwd(const Tensor& dy) { return dy; }

  // y[N, out] = x[N, in] W^T for a local [out, in] weight shard (bias added separately, because
  // a row-parallel layer adds it after region_exit).
  void linear(Tensor& y, const Tensor& x, const Param& W) const;
  // dx = dy W (skipped when dx is undefined); dW += dy^T x.
  void linear_bwd(Tensor* dx, const Tensor& dy, const Tensor& x, Param& W) const;

  // out[B*T, C] = wte[token] + wpe[t] (wpe may be null).
  virtual void embedding(Tensor& out, const int32_t* tokens, int64_t B, int64_t T,
                         const Param& wte, const Param* wpe) const;
  virtual void embedding_bwd(const Tensor& dout, const int32_t* tokens, int64_t B, int64_t T,
                             Param& wte, Param* wpe) const;

  // Fused softmax cross-entropy over this rank's logits [N, V_local]; returns sum of the losses
  // of the rows with target >= 0. With dloss != 0 the logits become their gradient (in place).
  virtual double cross_entropy(Tensor& logits, const int32_t* targets, int64_t vocab_real,
                               float dloss) const;

 protected:
  const loom_ops* ops_;
  GemmNumerics numerics_;
};

}  // namespace loom
