// What a run reports when it ends: its losses, throughput, steps, checkpoints and why it stopped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::train {

struct TrainSummary {
  int64_t steps = 0;
  double first_loss = 0, final_loss = 0;
  double first_val_loss = -1, final_val_loss = -1;  // -1: never evaluated
  double tokens_per_s = 0, mfu = 0;
  int64_t skipped_steps = 0;    // updates the precision slot skipped (fp16 overflow)
  int64_t first_step = 0;       // the first step this run trained (past 1 after a resume)
  int64_t last_step = 0;        // the last step this run trained
  int64_t last_saved_step = 0;  // the last step this run saved a checkpoint of; 0: none
  int64_t evaluations = 0;      // validation losses this run computed after an update
  std::string stopped_by;       // "SIGTERM", "SIGINT", ...: the run stopped early on a signal
  bool saved_on_stop = false;   // and saved a checkpoint of last_step first
  std::vector<double> step_ms,
      exposed_comm_ms;        // each step this run trained, as its metrics line has them
  double peak_mem_bytes = 0;  // the largest rank's
};

}  // namespace loom::train
