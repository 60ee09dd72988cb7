// The kernel entries of a loom_ops_v2 table, each pointed at the function of the same name in a
// namespace: every device (cpu, strict, cuda) fills its table from its own kernels this way, so a
// kernel added to the ABI is added here once and a device missing it fails to compile.
#pragma once

#define LOOM_OPS_KERNEL_ENTRIES(t, ns)                \
  (t).gemm = &ns::gemm;                               \
  (t).embedding_fwd = &ns::embedding_fwd;             \
  (t).embedding_bwd = &ns::embedding_bwd;             \
  (t).layernorm_fwd = &ns::layernorm_fwd;             \
  (t).layernorm_bwd = &ns::layernorm_bwd;             \
  (t).rmsnorm_fwd = &ns::rmsnorm_fwd;                 \
  (t).rmsnorm_bwd = &ns::rmsnorm_bwd;                 \
  (t).bias_add = &ns::bias_add;                       \
  (t).bias_bwd = &ns::bias_bwd;                       \
  (t).gelu_fwd = &ns::gelu_fwd;                       \
  (t).gelu_bwd = &ns::gelu_bwd;                       \
  (t).swiglu_fwd = &ns::swiglu_fwd;                   \
  (t).swiglu_bwd = &ns::swiglu_bwd;                   \
  (t).attention_fwd = &ns::attention_fwd;             \
  (t).attention_bwd = &ns::attention_bwd;             \
  (t).add = &ns::add;                                 \
  (t).accumulate = &ns::accumulate;                   \
  (t).scale = &ns::scale;                             \
  (t).sum_squares = &ns::sum_squares;                 \
  (t).softmax_xent = &ns::softmax_xent;               \
  (t).adamw = &ns::adamw;                             \
  (t).quantize = &ns::quantize;                       \
  (t).layernorm_fwd_eps = &ns::layernorm_fwd_eps;     \
  (t).rmsnorm_fwd_eps = &ns::rmsnorm_fwd_eps;         \
  (t).attention_gqa_fwd = &ns::attention_gqa_fwd;     \
  (t).attention_gqa_bwd = &ns::attention_gqa_bwd;     \
  (t).rope_fwd = &ns::rope_fwd;                       \
  (t).rope_bwd = &ns::rope_bwd;                       \
  (t).attention_block_fwd = &ns::attention_block_fwd; \
  (t).attention_block_bwd = &ns::attention_block_bwd; \
  (t).attention_merge = &ns::attention_merge;         \
  (t).gelu_erf_fwd = &ns::gelu_erf_fwd;               \
  (t).gelu_erf_bwd = &ns::gelu_erf_bwd;               \
  (t).adamw_multi = &ns::adamw_multi;                 \
  (t).sum_squares_multi = &ns::sum_squares_multi;     \
  (t).to_bf16 = &ns::to_bf16;                         \
  (t).from_bf16 = &ns::from_bf16;                     \
  (t).encode_blocks = &ns::encode_blocks;             \
  (t).decode_blocks = &ns::decode_blocks;             \
  (t).row_max = &ns::row_max;                         \
  (t).xent_stats = &ns::xent_stats;                   \
  (t).xent_grad = &ns::xent_grad;                     \
  (t).router_topk = &ns::router_topk;                 \
  (t).router_topk_bwd = &ns::router_topk_bwd;         \
  (t).gather_rows = &ns::gather_rows;                 \
  (t).combine_rows = &ns::combine_rows;               \
  (t).combine_rows_bwd = &ns::combine_rows_bwd

// The device contract's entries of a device whose memory the host cannot reach (strict,
// cuda), each pointed at the function of that name in the device's namespace.
#define LOOM_OPS_CONTRACT_ENTRIES(t, ns)      \
  (t).host_reachable = 0;                     \
  (t).copy = &ns::copy;                       \
  (t).zero = &ns::zero;                       \
  (t).set_stream = &ns::set_stream_entry;     \
  (t).record_event = &ns::record_event;       \
  (t).wait_event = &ns::wait_event;           \
  (t).sync_event = &ns::sync_event;           \
  (t).synchronize = &ns::synchronize;         \
  (t).pinned_alloc = &ns::pinned_alloc_entry; \
  (t).pinned_free = &ns::pinned_free_entry
