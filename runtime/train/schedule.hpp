// Learning-rate schedule: linear warm-up to `peak`, then cosine decay to peak * min_ratio at the
// last step (Loshchilov & Hutter's SGDR without restarts, as GPT-3 and llm.c use it).
#pragma once

#include <cmath>
#include <cstdint>

namespace loom::train {

struct LrSchedule {
  double peak, min_ratio;
  int64_t warmup, total;

  // step counts from 1.
  double at(int64_t step) const {
    if (warmup > 0 && step <= warmup) return peak * static_cast<double>(step) / warmup;
    if (total <= warmup) return peak;
    double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
    return peak * (min_ratio + (1.0 - min_ratio) * cosine);
  }
};

}  // namespace loom::train
