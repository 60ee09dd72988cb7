// What the GPT's layers (embedding, blocks, head, the MoE MLP) are built from: a parameter
// declared with its role and shard, the MLP's activation, per-micro-batch activation slots, and the
// temporaries and tables the blocks share.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpt/norm.hpp"
#include "model/config.hpp"
#include "model/params.hpp"
#include "parallel/layer_api.hpp"

namespace loom::gpt {

// The vocabulary is padded to a multiple of 64 per tensor-parallel rank.
inline int64_t vocab_rows(const model::Config& c, const LayerApi& api) {
  return c.padded_vocab(64 * api.tp_size());
}

inline Tensor rows_of(const Tensor& t, int64_t rows) { return t.rows(0, rows); }

inline Init normal(float std) { return {Init::Normal, std}; }
inline constexpr Init kZeros{Init::Zeros, 0.f};
inline constexpr Init kOnes{Init::Ones, 0.f};

// Whether the device stores bf16 (quantize_into) and its typed entries for `op` (loom_op_id) read
// and write it.
bool device_reads_bf16(const loom_ops_v2* o, int op);

// a.out = norm(x) over n rows: written by the norm itself where a.out is fp32 or the device's norm
// writes its bf16 (`writes`), else computed into the fp32 `staging` and stored as `reader`'s GEMM
// operand, cast once (the same bits).
void norm_stored(const LayerApi& api, const Norm& norm, NormActs& a, const Tensor& x, int64_t n,
                 const Tensor& staging, const Param& reader, bool writes);

// Declares a parameter with its role, sharded as the layer API says, and lists it in `owner`.
Param& declare_param(ParamStore& ps, LayerApi& api, std::vector<Param*>& owner, std::string name,
                     Role role, std::vector<int64_t> shape, Init init, bool decay, int fused = 1);

// The MLP's activation ([model] mlp) over N rows of F outputs, forward and backward.
void activation_fwd(const loom_ops_v2* o, const model::Config& c, float* act, const float* fc,
                    int64_t N, int64_t F);
void activation_bwd(const loom_ops_v2* o, const model::Config& c, float* dfc, const float* fc,
                    const float* dact, int64_t N, int64_t F);
// The same with the pre-activation `fc`, the activation `act` and the gradient `dfc` each fp32
// or bf16: a bf16 one goes through the device's typed table, which takes it where its
// dtypes[LOOM_OP_ACTIVATION] has bf16.
void activation_fwd(const loom_ops_v2* o, const model::Config& c, const Tensor& act,
                    const Tensor& fc, int64_t N, int64_t F);
void activation_bwd(const loom_ops_v2* o, const model::Config& c, const Tensor& dfc,
                    const Tensor& fc, const float* dact, int64_t N, int64_t F);

// A [rows, cols] view of the front of a buffer allocated for the unsharded layer: under tensor
// parallelism a rank's widths are a fraction of the buffer's.
inline Tensor view(const Tensor& buf, int64_t rows, int64_t cols) {
  return Tensor::borrow(buf.data(), {rows, cols}, buf.dtype());
}

// Per-micro-batch activation slots: slot k is allocated by `make` the first time it is used.
template <class Acts>
class Slots {
 public:
  void init(std::function<std::unique_ptr<Acts>()> make) {
    make_ = std::move(make);
    all_.clear();
    use(0);
  }
  void use(int k) {
    while (static_cast<int>(all_.size()) <= k) all_.push_back(make_());
    cur_ = all_[k].get();
  }
  Acts& operator*() const { return *cur_; }
  Acts* operator->() const { return cur_; }

 private:
  std::function<std::unique_ptr<Acts>()> make_;
  std::vector<std::unique_ptr<Acts>> all_;
  Acts* cur_ = nullptr;
};

// Temporaries shared by every block: backward's, which forward borrows too (one block runs at a
// time), and rows, [rows, C] within one call (a norm's fp32 output before it is stored, the
// projections' outputs, dnorm, the attention output widened for its backward). dact is fp32 and
// at least as wide as q, k and v, whose GEMMs write into it where qkv is kept bf16. dfc and dqkv
// are bf16 while every block that uses them asks for bf16 (use_dfc, use_dqkv, from the blocks'
// constructors).
struct Scratch {
  Tensor dh, dqkv, datt, dfc, dact, rows;
  Scratch(const model::Config& c, int64_t rows);
  void use_dfc(loom_dtype dtype);
  void use_dqkv(loom_dtype dtype);  // as use_dfc, for dqkv (every block's attention writes it)
  const Tensor& ones();             // d_model ones, made on first use (Norm::ones)

 private:
  bool wide_dfc_ = false, wide_dqkv_ = false;
  Tensor ones_;
};

// RoPE's cos and sin of every position's angles, [seq_len, head_dim / 2] each, shared by blocks.
struct RopeTables {
  Tensor cos, sin;
  explicit RopeTables(const model::Config& c);
};

}  // namespace loom::gpt
