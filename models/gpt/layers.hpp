// The three layer kinds of a GPT: token+position embedding, a pre-LN transformer block, and the
// final norm + LM head + loss. Each declares its parameters with roles and runs its math through
// the parallel layer API, never testing a parallel degree itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpt/layer.hpp"
#include "gpt/layer_parts.hpp"
#include "gpt/norm.hpp"
#include "model/config.hpp"
#include "model/params.hpp"
#include "parallel/layer_api.hpp"

namespace loom::gpt {

class MoeMlp;
struct Marks;  // the profiled block's segment timer

// The dtypes a block keeps its activations in: LOOM_BF16 where the precision slot keeps the GEMM
// operand they are (or become) in bf16 (GemmNumerics::storage), so each is rounded once and held
// in half the bytes. norm_out: both norms' outputs (fp32 when sp gathers them); act: the MLP's
// activation; fc: the MLP's pre-activation, where act is bf16 and the device's activations read
// bf16; att: the attention's output, the projection's operand, widened again for the attention's
// backward; qkv: q, k and v, where the device's attention reads bf16 and no cp plugin exchanges
// them (its attention takes fp32); dfc: the MLP's pre-activation gradient, asked of the scratch
// in bf16 where the GEMM takes it as a plain bf16 gradient operand, fc is kept bf16 and the
// device's activation and bias kernels write and read bf16 (not SwiGLU: its forward GEMM output
// borrows dfc's scratch). dqkv: q, k and v's gradients, asked of the scratch in bf16 where qkv is
// kept bf16, their GEMMs take plain bf16 gradient operands, no RoPE turns them after the attention
// writes them and the device's bias kernels read bf16. bf16_fc, bf16_att, bf16_qkv, bf16_dfc and
// bf16_dqkv: those hold bf16 values, as
// PyTorch's autocast keeps a bf16 linear's output and its gradient, whichever their dtype (fp32
// storage rounded in place on a device without bf16 storage), so every device computes the same
// values. norm_writes: the norms write their bf16 outputs themselves (the device's norms write
// bf16 and the GEMMs after them take plain bf16), instead of an fp32 output cast after.
struct ActDtypes {
  loom_dtype norm_out = LOOM_F32, act = LOOM_F32, fc = LOOM_F32, att = LOOM_F32, qkv = LOOM_F32,
             dfc = LOOM_F32, dqkv = LOOM_F32, residual = LOOM_F32;
  bool bf16_fc = false, bf16_att = false, bf16_qkv = false, bf16_dfc = false, bf16_dqkv = false;
  bool norm_writes = false;
  // The residual stream's copies the norms' backward reads (x_in, x_mid) hold bf16 values
  // (Norm::keep_input): in `residual`'s storage, 16 bits where the device's norms read bf16.
  bool bf16_residual = false;
};

// What a block keeps from forward for backward: block input, residual after attention, both
// norms, q/k/v (rotated), attention output and its log-sum-exp, MLP pre-activation and
// activation. Under recomputation a block's slots own only what its policy keeps and alias the
// rest to one shared set (RecomputeScratch), which backward refills before it reads them.
struct BlockActs {
  Tensor x_in, x_mid, qkv, att, lse, fc, act;
  NormActs ln1, ln2;
  BlockActs() = default;
  BlockActs(const model::Config& c, int64_t rows, const ActDtypes& dtypes = {});
  // Owns what `policy` keeps ("selective" or "full"), aliases the rest to `shared` (whose fp32
  // tensors hold narrower ones as well).
  BlockActs(const model::Config& c, int64_t rows, const std::string& policy,
            const BlockActs& shared, const ActDtypes& dtypes = {});
  // Only what `policy` drops: the set its blocks share.
  static BlockActs dropped_by(const model::Config& c, int64_t rows, const std::string& policy);
};

// The activations every recomputing block shares (one block runs backward at a time), and the
// residual stream a full replay runs on.
struct RecomputeScratch {
  BlockActs acts;
  Tensor x;
  RecomputeScratch(const model::Config& c, int64_t rows);  // for c.recompute, "selective" or "full"
  int64_t bytes() const { return bytes_; }

 private:
  int64_t bytes_ = 0;
};

class Embedding : public Layer {
 public:
  Embedding(const model::Config& c, LayerApi& api, ParamStore& ps);
  const std::string& name() const override { return name_; }
  void forward(const Microbatch& mb, Tensor& x) override;
  void backward(const Microbatch& mb, Tensor& dx) override;
  Param& wte() { return *wte_; }

 private:
  std::string name_ = "embedding";
  LayerApi& api_;
  Param *wte_, *wpe_ = nullptr;  // no position table under RoPE or positions = "none"
};

// Generation: one block's keys and values of the positions decoded so far (one sequence), so a
// new token attends to them without recomputing the prefix.
struct KvCache {
  Tensor k, v;         // [capacity, Hkv * D] each, rows = positions
  int64_t length = 0;  // positions filled
};

class Block : public Layer {
 public:
  // `profile`: block 0 records its segment timings in api.profile().
  // `rope`: the position tables when [model] positions = "rope", else null. `recompute`: the
  // shared activations when this block recomputes ([model] recompute), else null.
  Block(int index, const model::Config& c, LayerApi& api, ParamStore& ps, Scratch& scratch,
        int64_t rows, const RopeTables* rope, RecomputeScratch* recompute, bool profile = false);
  const std::string& name() const override { return name_; }
  void forward(const Microbatch& mb, Tensor& x) override;
  void backward(const Microbatch& mb, Tensor& dx) override;
  int64_t saved_bytes(const Microbatch& mb) const override;
  void use_slot(int k) override;
  // The block's MoE MLP, or null for a dense one.
  MoeMlp* moe() const { return moe_.get(); }
  // Generation: forward appends this call's keys and values to `cache` and attends over all of
  // it (the rows are positions cache.length, cache.length + 1, ...); null: training.
  void set_kv_cache(KvCache* cache) { kv_ = cache; }
  ~Block() override;

 private:
  using Acts = BlockActs;
  // Where this rank's q, k and v lie in a buffer of N rows: one [N, q | k | v] matrix for
  // multi-head attention (fused weight), or [N, q] then [N, k | v] for grouped-query.
  struct Qkv {
    float *q, *k, *v;
    int64_t ldq, ldkv;
  };
  Qkv qkv_layout(const Tensor& buf, int64_t N) const;
  // The same places as typed arguments, for a buffer of either dtype.
  struct QkvRefs {
    loom_cref q, k, v;
    int64_t ldq, ldkv;
  };
  QkvRefs qkv_refs(const Tensor& buf, int64_t N) const;
  // Elements of q, k and v this rank holds for N rows.
  int64_t qkv_count(int64_t N) const { return N * (heads_ + 2 * kv_heads_) * c_.head_dim(); }
  void attend(const Microbatch& mb, Tensor& qkv_out, Tensor& att_out);
  void keep_rounded(const Tensor& wide, Tensor& kept, bool rounds, int64_t count) const;
  std::string name_;
  const model::Config& c_;
  LayerApi& api_;
  Scratch& s_;
  const RopeTables* rope_;
  RecomputeScratch* recompute_;  // null: this block keeps everything
  std::string policy_ = "none";
  bool profiled_, replaying_ = false;
  Norm ln1_, ln2_;
  // Attention: qkv_w_ (fused, multi-head) or q_w_ and kv_w_ (grouped-query); biases optional.
  Param *qkv_w_ = nullptr, *qkv_b_ = nullptr, *q_w_ = nullptr, *q_b_ = nullptr, *kv_w_ = nullptr,
        *kv_b_ = nullptr, *proj_w_, *proj_b_ = nullptr;
  Param *fc_w_ = nullptr, *fc_b_ = nullptr, *out_w_ = nullptr, *out_b_ = nullptr;
  int64_t heads_ = 0, kv_heads_ = 0;  // held on this rank
  std::unique_ptr<MoeMlp> moe_;
  KvCache* kv_ = nullptr;
  ActDtypes dtypes_;
  Slots<Acts> acts_;
  void declare_attention(const std::string& p, ParamStore& ps, float resid_std);
  void project_qkv(const Microbatch& mb, const Tensor& x, Tensor& buf);
  void project_qkv_bwd(const Microbatch& mb, Tensor& dqkv, const Tensor& x, Tensor& dh);
  // Refills what the policy dropped: the norms' outputs and the MLP activation (selective), or
  // the whole forward from the saved input (full), with the same arithmetic as forward.
  void recompute(const Microbatch& mb);
  void mlp_backward(const Microbatch& mb, Tensor& dx, Tensor& dnorm, Marks& marks);
  void attention_backward(const Microbatch& mb, Tensor& dx, Tensor& dnorm, Marks& marks);
  void attend_cached(const Microbatch& mb, const Qkv& L, Tensor& att);
  // act = gelu/swiglu(fc) over N rows, written in act's dtype by the kernel, or computed in the
  // backward scratch and stored cast as the output GEMM's operand (fc fp32, act bf16).
  void store_activation(Tensor& act, const Tensor& fc, int64_t N);
  // a = norm(x) over n rows likewise, a.out stored cast as the GEMMs' after it.
  void norm_forward(const Norm& norm, NormActs& a, const Tensor& x, int64_t n);
  ActDtypes operand_dtypes(const LayerApi& api) const;
};

class Head : public Layer {
 public:
  // With tied embeddings the head reads the embedding's table: `tied_wte` when this rank builds
  // the embedding too, otherwise a mirror of it that the pipeline keeps equal (Param::mirror).
  // Borrows the blocks' scratch: dh (the head runs while no block does), and the ones.
  Head(const model::Config& c, LayerApi& api, ParamStore& ps, Param* tied_wte, Scratch& s,
       int64_t rows);
  const std::string& name() const override { return name_; }
  void forward(const Microbatch& mb, Tensor& x) override;
  void backward(const Microbatch& mb, Tensor& dx) override;
  int64_t saved_bytes(const Microbatch& mb) const override;
  void use_slot(int k) override { acts_.use(k); }
  // Sum of token losses of the last forward, and its logits [rows, V_padded] (inference only:
  // training overwrites them with their gradient).
  double loss_sum() const { return loss_sum_; }
  const Tensor& logits() const { return acts_->logits; }

 private:
  // Saved for backward: the input, the norm, and the logits (their gradient after the loss).
  struct Acts {
    Tensor x_in, logits;
    NormActs norm;
    Acts(int64_t rows, int64_t C, int64_t vocab_local, loom_dtype norm_out, loom_dtype residual);
  };
  std::string name_ = "head";
  const model::Config& c_;
  LayerApi& api_;
  Norm norm_;
  Param* head_w_;
  Slots<Acts> acts_;
  Tensor dh_;                   // the scratch's dh
  bool bf16_residual_ = false;  // x_in holds bf16 values (Norm::keep_input)
  bool norm_writes_ = false;    // the norm writes its bf16 output itself (ActDtypes::norm_writes)
  double loss_sum_ = 0;
};

}  // namespace loom::gpt
