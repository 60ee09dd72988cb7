// The parallel layer API backed by the tensor-slot plugin (tp) and, optionally, the sequence-slot
// plugin (sp): the adapter between the model's C++ calls and the plugins' C tables.
#pragma once

#include <memory>
#include <vector>

#include "loader/registry.hpp"
#include "parallel/layer_api.hpp"

namespace loom {

class PluginLayers : public LayerApi {
 public:
  // The tensor plugin's overlap options: whether the regions' collectives run behind GEMMs, and
  // in how many row chunks a row-parallel GEMM runs then.
  struct Overlap {
    bool on = false;
    int chunks = 1;
  };
  // `sequence` may be null (tensor parallelism alone).
  PluginLayers(const loom_ops_v2* ops, GemmNumerics numerics, const loom_tensor_context& ctx,
               plugins::Instance& tensor, plugins::Instance* sequence, Overlap overlap);

  Slice shard(Role role, const std::vector<int64_t>& global_shape, int fused) const override;
  int tp_size() const override { return tp_; }
  int64_t local_rows(int64_t rows) const override { return seq_ ? rows / tp_ : rows; }
  bool region_gathers() const override { return seq_ != nullptr; }
  int64_t first_row(int64_t rows) const override { return seq_ ? rank_ * (rows / tp_) : 0; }
  void finish_replicated_grads(const std::vector<Param*>& params) override;
  std::vector<float> logits_row(const Tensor& logits, int64_t row) const override;

  Tensor region_enter(const Tensor& h) override;
  Tensor region_enter_bwd(const Tensor& dh) override;
  Tensor region_exit(const Tensor& y) override;
  Tensor region_exit_bwd(const Tensor& dy) override;
  Tensor linear_exit(Tensor& y, const Tensor& x, const Param& W) override;
  void enter_linears(const Tensor& x, std::initializer_list<LinearOut> outs) override;
  void exit_bwd_linear(Tensor& dx, const Tensor& dy_local, const Tensor& x, Param& W) override;
  void linears_bwd_regather(Tensor& dx, const Tensor& x_local,
                            std::initializer_list<LinearGrad> grads) override;

  void embedding(Tensor& out, const int32_t* tokens, int64_t B, int64_t T, const Param& wte,
                 const Param* wpe) const override;
  void embedding_bwd(const Tensor& dout, const int32_t* tokens, int64_t B, int64_t T, Param& wte,
                     Param* wpe) const override;
  double cross_entropy(Tensor& logits, const int32_t* targets, int64_t vocab_begin,
                       int64_t vocab_real, float dloss) const override;

 private:
  Tensor gather(const Tensor& local) const;  // sp: local rows -> all rows
  Tensor scatter(const Tensor& full) const;  // sp: all rows -> this rank's rows, summed
  // Overlap: f's and g's collectives issued as ABI 2 defines them (all-reduce sum over tp; under
  // sp reduce-scatter), asynchronously, on the watched comm table.
  loom_work* issue_sum(const Tensor& in, Tensor& out);
  void wait(loom_work* w);
  void wait_all(const std::vector<loom_work*>& works);
  // Issues the all-gather of rows [c0, c1) of every rank's block of `local` into `staged`
  // (rank-major).
  loom_work* issue_gather(const Tensor& local, int64_t c0, int64_t c1, Tensor& staged);
  // Gathers `local` in k row chunks, chunk c + 1 in flight while use(staged, c0, c1) runs on chunk
  // c; every handle is completed whatever happens.
  template <class Use>
  void gather_in_chunks(const Tensor& local, int k, Use use);
  // Whether sp's gathers run in chunks: overlap on, sp on, and operands the precision slot leaves
  // exact (it rounds a whole operand at once).
  bool chunked_gathers() const;

  loom_tensor_context ctx_;
  const loom_tensor_v2* tensor_;
  void* tensor_self_;
  const loom_sequence_v2* seq_ = nullptr;
  void* seq_self_ = nullptr;
  int tp_ = 1, rank_ = 0;
  int chunks_ = 1;
};

}  // namespace loom
