// The op table ABI 3 plugins receive (<loom/ops.h>: typed arguments, one entry per operation),
// built over a device's ABI 2 table (tensor/ops_v2.h), which the runtime itself calls through.
// Each typed entry checks its arguments' dtypes against the mask it publishes and forwards to
// the ABI 2 kernel of that dtype; a dtype outside the mask stops the process naming the entry.
#pragma once

#include <loom/ops.h>

#include "tensor/ops_v2.h"

namespace loom::ops {

// The typed table over `inner` (one per ABI 2 table, up to 8 in a process, built on first use
// and kept); nullptr for nullptr.
const loom_ops* typed(const loom_ops_v2* inner);

// The dtype mask typed() publishes for each loom_op_id over `inner`: LOOM_F32 everywhere, and
// bf16 where the ABI 2 table has a kernel for it (gemm_typed's operands, the bf16 codecs).
void typed_dtypes(const loom_ops_v2& inner, uint32_t (&dtypes)[LOOM_OP_COUNT]);

}  // namespace loom::ops
