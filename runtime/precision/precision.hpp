// The precision slot as the runtime drives it. The plugin is the policy (which format and scale
// each GEMM operand gets, the loss scale, when to skip a step); the op table does the casts. A
// step ends with one handshake: the plugin's per-step stats are reduced across ranks, the
// overflow verdict (already global) is handed in, and the plugin answers skip or apply.
#pragma once

#include <loom/plugin.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loader/host.hpp"
#include "loader/registry.hpp"
#include "tensor/tensor.hpp"

namespace loom {

class Precision {
 public:
  Precision(const plugins::Found& found, const loom_options* options, const loom_ops_v2* ops);
  ~Precision();
  Precision(const Precision&) = delete;
  Precision& operator=(const Precision&) = delete;

  const char* name() const;
  int32_t compute_dtype() const { return table_->compute_dtype; }
  // Operands pass through unchanged (fp32): no copies, no calls.
  bool exact() const { return table_->exact != 0; }

  // A copy of `t` as the GEMM operand `site` must see it (`t` itself when exact). Sites are named
  // "<param>" for a weight, "<param>.x" and "<param>.dy" for the activation and the gradient
  // that meet it; the first use of a name registers it. A bf16 site (scale 1) gets a real bf16
  // copy where the device stores bf16 operands (as bf16_storage() says); every other narrow site
  // gets its rounded values in fp32 storage. Either way the GEMM sees the same values. A bf16 `t`
  // is an operand store() wrote: it is returned as it is.
  Tensor operand(const Tensor& t, const std::string& site, loom_operand_role role);
  // The dtype a tensor that only ever meets GEMMs as `site` can be kept in: LOOM_BF16 where
  // operand() makes a real bf16 copy and the plugin does not observe amaxes, LOOM_F32
  // otherwise. Kept so, it is cast once, not at each GEMM, and takes half the memory.
  loom_dtype storage_dtype(const std::string& site, loom_operand_role role);
  // Whether `site`'s operand is plain bf16 (scale 1) and the plugin does not observe amaxes: the
  // values a tensor kept for it holds are bf16's on every device (in 16 bits where storage_dtype
  // says LOOM_BF16, rounded in fp32 storage elsewhere), so devices agree.
  bool plain_bf16(const std::string& site, loom_operand_role role);
  // dst (bf16, as storage_dtype said) = what operand(t, site, role) would return.
  void store(const Tensor& t, const std::string& site, loom_operand_role role, Tensor& dst);
  // This run's GEMMs take bf16 operands (the plugin's compute dtype) and the device stores them
  // in 16 bits: its gemm_typed takes them, on its own bf16 instructions or widened to fp32 as it
  // goes (a CPU without AMX), with the emulation's values either way.
  bool bf16_storage() const { return narrow_bf16_ && !exact() && compute_dtype() == LOOM_BF16; }
  // ... and multiplies them with its own instructions (gemm_operand_dtypes has bf16).
  bool bf16_gemms() const { return native_bf16_ && bf16_storage(); }

  // The factor the loss gradient carries this step (1 without loss scaling).
  double loss_scale() const;
  // Ends the step: `over_sharers` reduces (MAX, in place) across the ranks that hold the same
  // sites, the ranks of one pipeline stage; `over_world` across every rank, for the overflow
  // flag; `found_inf` says whether this rank saw non-finite gradients. True = skip it.
  using ReduceMax = std::function<void(float*, int64_t)>;
  bool end_step(bool found_inf, const ReduceMax& over_sharers, const ReduceMax& over_world);
  // The plugin's metrics for the step that just ended.
  std::vector<std::pair<std::string, double>> metrics() const;
  // The scaling state (empty for plugins without one), for checkpoints.
  std::string save_state() const;
  void load_state(const std::string& bytes);

 private:
  int32_t site_id(const std::string& site, loom_operand_role role);
  bool real_bf16(const loom_operand_format& f) const;  // a bf16 copy in 16 bits, not emulated
  void cast_bf16(int32_t id, const Tensor& t, Tensor& dst);
  [[noreturn]] void fail(const std::string& what) const;
  std::unique_ptr<plugins::Instance> instance_;
  const loom_precision_v2* table_;
  const loom_ops_v2* ops_;
  bool narrow_bf16_;  // the device's gemm_typed takes bf16 operands, stored by quantize_into
  bool native_bf16_;  // ... and multiplies them on bf16 instructions
  std::unordered_map<std::string, int32_t> sites_;
  mutable loom_error err_;
};

// C[M, N] = alpha op(A) op(B) + beta C over GEMM operands as Precision::operand returns them:
// fp32 through the op table's gemm, a narrow one through its gemm_typed.
void operand_gemm(const loom_ops_v2& ops, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb,
                  float beta, float* C, int64_t ldc);

}  // namespace loom
