// The parallel layer API: what the model calls instead of raw kernels wherever a parallel
// strategy could change the meaning. The model declares each parameter with a role and calls
// region_enter / linear / region_exit / embedding / cross_entropy; the tensor and sequence slots
// decide what those do. This base class is the built-in degree-1 behaviour (dense layers on one
// rank, every region boundary the identity).
#pragma once

#include <loom/plugin.h>

#include <functional>
#include <initializer_list>
#include <vector>

#include "model/params.hpp"
#include "parallel/segment_profile.hpp"
#include "precision/precision.hpp"
#include "tensor/tensor.hpp"

namespace loom {

class ExpertDispatch;
class ContextAttention;

// The precision slot's say over GEMM operands (none = exact fp32).
struct GemmNumerics {
  Precision* precision = nullptr;
  // `t` cast for use as the GEMM operand `site`; `t` itself when exact.
  Tensor operand(const Tensor& t, const std::string& site, loom_operand_role role) const {
    return precision ? precision->operand(t, site, role) : t;
  }
  // false: activations stay fp32 and are cast at each GEMM, as before storage() existed (the
  // runs agree within bf16's rounding of what a stored run keeps rounded: q, k, v, the attention
  // output, fc and dfc; tests/unit/operand_storage_test.cpp compares them).
  bool store_narrow = true;
  // The dtype a tensor that only meets GEMMs as `site` is kept in (Precision::storage_dtype).
  loom_dtype storage(const std::string& site, loom_operand_role role) const {
    return precision && store_narrow ? precision->storage_dtype(site, role) : LOOM_F32;
  }
  // Whether a tensor kept for `site` holds bf16 values on every device (Precision::plain_bf16).
  bool plain_bf16(const std::string& site, loom_operand_role role) const {
    return precision && store_narrow && precision->plain_bf16(site, role);
  }
  // dst (bf16, as storage() said) = t as `site`'s operand.
  void store(const Tensor& t, const std::string& site, loom_operand_role role, Tensor& dst) const;
};

// A linear layer's weight-gradient GEMM set aside by a split backward (a zero-bubble schedule's
// B), run by its W: dW += dy^T x over the operands as the precision slot rounded them. Copies, so
// the activation slot and the gradient buffer they came from can be reused in between.
struct DeferredWeightGrad {
  Param* W = nullptr;
  Tensor dy, x;
};

// One layer's set-aside GEMMs for one micro-batch. The copies' buffers are kept and refilled
// step after step, as activation slots are: a fresh allocation per GEMM costs page faults that
// would eat what the split saves. `copies` false keeps views instead, for GEMMs run before the
// layer's backward returns (tp overlap), whose operands nothing overwrites until then.
class DeferredWeightGrads {
 public:
  explicit DeferredWeightGrads(bool copies = true) : copies_(copies) {}
  void add(Param& W, const Tensor& dy, const Tensor& x);
  void clear() { used_ = 0; }
  const DeferredWeightGrad* begin() const { return items_.data(); }
  const DeferredWeightGrad* end() const { return items_.data() + used_; }
  // What the copies in use hold.
  int64_t bytes() const;

 private:
  std::vector<DeferredWeightGrad> items_;
  size_t used_ = 0;
  bool copies_;
};

class LayerApi {
 public:
  LayerApi(const loom_ops_v2* ops, GemmNumerics numerics = {}) : ops_(ops), numerics_(numerics) {}
  virtual ~LayerApi() = default;
  const loom_ops_v2* ops() const { return ops_; }
  const GemmNumerics& numerics() const { return numerics_; }
  // Segment timings of the profiled layer ([run] profile_layer).
  SegmentProfile& profile() const { return profile_; }

  // The part of a parameter this rank holds, given its role and global shape; `fused` says how
  // many matrices are stacked along the split dimension (3 for QKV).
  virtual Slice shard(Role role, const std::vector<int64_t>& global_shape, int fused = 1) const;
  // Tensor-parallel degree, and what the model must respect because of it.
  virtual int tp_size() const { return 1; }
  // Rows of the residual stream this rank holds for `rows` tokens (sequence parallel: a block).
  virtual int64_t local_rows(int64_t rows) const { return rows; }
  // The first of this rank's rows among the full rows.
  virtual int64_t first_row(int64_t /*rows*/) const { return 0; }
  // Row `row` of the head's logits over the whole vocabulary (tp gathers the vocabulary shards).
  virtual std::vector<float> logits_row(const Tensor& logits, int64_t row) const;
  // After backward: sums over tp the gradients that saw only this rank's rows (sequence parallel).
  // `params`: some of them (a ZeRO unit, before the data plugin reduces its gradients), or all.
  virtual void finish_replicated_grads(const std::vector<Param*>& /*params*/) {}
  // Megatron's f (enter) and g (exit) around a column-parallel ... row-parallel pair.
  virtual Tensor region_enter(const Tensor& h) { return h; }
  // region_enter gathers rows from other ranks (sequence parallelism), over fp32 tensors only.
  virtual bool region_gathers() const { return false; }
  virtual Tensor region_enter_bwd(const Tensor& dh) { return dh; }
  virtual Tensor region_exit(const Tensor& y) { return y; }
  virtual Tensor region_exit_bwd(const Tensor& dy) { return dy; }

  // y[N, out] = x[N, in] W^T for a local [out, in] weight shard (bias added separately, because
  // a row-parallel layer adds it after region_exit).
  void linear(Tensor& y, const Tensor& x, const Param& W) const;
  // f and the column-parallel linears after it: ys[i] = f(x) W_i^T. Sequence parallelism with tp
  // overlap all-gathers x in row chunks, each chunk's GEMMs behind the next chunk's gather.
  struct LinearOut {
    Tensor* y;
    const Param* W;
  };
  virtual void enter_linears(const Tensor& x, std::initializer_list<LinearOut> outs) {
    const Tensor h = region_enter(x);
    for (const LinearOut& o : outs) linear(*o.y, h, *o.W);
  }
  // A row-parallel linear and the region exit after it: g(x W^T). Tensor parallelism with overlap
  // runs the GEMM in row chunks, each chunk's collective behind the next chunk's GEMM.
  virtual Tensor linear_exit(Tensor& y, const Tensor& x, const Param& W) {
    linear(y, x, W);
    return region_exit(y);
  }
  // dx = dy W (skipped when dx is undefined; dx += dy W with `accumulate`); dW += dy^T x, or that
  // GEMM set aside while deferring.
  void linear_bwd(Tensor* dx, const Tensor& dy, const Tensor& x, Param& W,
                  bool accumulate = false) const;
  // While set, linear_bwd appends its weight-gradient GEMM to `into` instead of running it (null:
  // run them). Only the linear layers' GEMMs wait; every other gradient is computed at once.
  // The backward of a row-parallel linear with g's backward before it: dy = g'(dy_local), dx = dy
  // W, dW += dy^T x. Sequence parallelism with tp overlap all-gathers dy in row chunks, each
  // chunk's dx GEMMs behind the next chunk's gather.
  virtual void exit_bwd_linear(Tensor& dx, const Tensor& dy_local, const Tensor& x, Param& W) {
    const Tensor dy = region_exit_bwd(dy_local);
    linear_bwd(&dx, dy, x, W);
  }
  // The backward of column-parallel linears that read f(x_local): dx = sum of dy_i W_i, then
  // dW_i += dy_i^T f(x_local), with f's gather run again (sp keeps no gathered copy). With tp
  // overlap the gather runs behind the dx GEMMs, which do not need it.
  struct LinearGrad {
    const Tensor* dy;
    Param* W;
  };
  virtual void linears_bwd_regather(Tensor& dx, const Tensor& x_local,
                                    std::initializer_list<LinearGrad> grads) {
    const Tensor h = region_enter(x_local);
    bool first = true;
    for (const LinearGrad& g : grads) linear_bwd(&dx, *g.dy, h, *g.W, !first), first = false;
  }
  void defer_weight_grads(DeferredWeightGrads* into) { deferred_ = into; }
  void weight_grad(const DeferredWeightGrad& d) const;
  // Runs the weight-gradient GEMMs tp overlap set aside (behind a collective, or at the end of a
  // layer's backward, which calls it).
  void flush_weight_grads();

  // out[B*T, C] = wte[token] + wpe[t] (wpe may be null).
  virtual void embedding(Tensor& out, const int32_t* tokens, int64_t B, int64_t T, const Param& wte,
                         const Param* wpe) const;
  virtual void embedding_bwd(const Tensor& dout, const int32_t* tokens, int64_t B, int64_t T,
                             Param& wte, Param* wpe) const;

  // Fused softmax cross-entropy over this rank's logits [N, V_local] (the vocabulary rows
  // [vocab_begin, vocab_begin + V_local) of the head); returns sum of the losses
  // of the rows with target >= 0. With dloss != 0 the logits become their gradient (in place).
  virtual double cross_entropy(Tensor& logits, const int32_t* targets, int64_t vocab_begin,
                               int64_t vocab_real, float dloss) const;

  // The expert slot (ep > 1): this rank holds a block of each MoE layer's experts and sends
  // routed rows to the others' through it. Null: every expert is here.
  void set_experts(ExpertDispatch* e) { experts_ = e; }
  ExpertDispatch* experts() const { return experts_; }

  // The context slot (cp > 1): this rank holds some positions of every sequence (the plugin's
  // split), and attention reaches the other cp ranks' keys. Null: whole sequences are here.
  void set_context(ContextAttention* c) { context_ = c; }
  ContextAttention* context() const { return context_; }
  // The global position of local row t of a sequence.
  int64_t position(int64_t t) const;
  // Generation: the rows of the next forward are positions p, p + 1, ... of their sequence.
  void set_position_offset(int64_t p) { offset_ = p; }
  // Causal grouped-query attention of this rank's queries over the whole sequence's keys (the
  // op table's attention_gqa_fwd/_bwd without cp).
  void attention(const loom_attention_args& a) const;
  void attention_bwd(const loom_attention_args& a) const;
  // RoPE over B sequences of T local rows, each at its global position; `inverse` for backward.
  void rope(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D, const float* cos,
            const float* sin, bool inverse) const;

 protected:
  // linear_bwd's halves, over the gradient as the precision slot rounded it.
  void input_grad(Tensor& dx, const Tensor& dyr, const Param& W, bool accumulate) const;
  void add_weight_grad(const Tensor& dyr, const Tensor& x, Param& W) const;
  // A learned position table where the embedding op cannot add it (cp, sp, generation): row i of
  // `rows` is local row first + i of a sequence of T. Through the op table, row by row, since the
  // rows and the table may be device memory:
  //   add_positions:     rows[i] += table[position((first + i) % T)]
  //   add_to_positions:  table[position((first + i) % T)] += rows[i]
  void add_positions(float* rows, const float* table, int64_t n, int64_t first, int64_t T,
                     int64_t C) const;
  void add_to_positions(float* table, const float* rows, int64_t n, int64_t first, int64_t T,
                        int64_t C) const;
  const loom_ops_v2* ops_;
  GemmNumerics numerics_;
  mutable SegmentProfile profile_;
  ExpertDispatch* experts_ = nullptr;
  ContextAttention* context_ = nullptr;
  int64_t offset_ = 0;
  DeferredWeightGrads* deferred_ = nullptr;
  // Tensor parallelism with overlap: a layer's weight-gradient GEMMs wait here for the next
  // backward collective (region_enter_bwd), which they run behind.
  bool overlap_ = false;
  mutable DeferredWeightGrads overlapped_{false};
};

}  // namespace loom
