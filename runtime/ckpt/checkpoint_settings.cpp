#include "ckpt/checkpoint_settings.hpp"

namespace loom::ckpt {

using config::kInf;
using config::ValueType;

config::SectionSpec checkpoint_section() {
  return {"checkpoint",
          "saving and resuming training state (docs/checkpoints.md); the writer is [plugins] ckpt",
          {
              {"dir", ValueType::String, "\"\"",
               "where step directories go; \"\" = <run dir>/checkpoints"},
              {"every", ValueType::Int, "0",
               "save after every N steps (and after the last); 0 = never", 0, kInf},
              {"keep_last", ValueType::Int, "3",
               "committed checkpoints kept; the newest is never deleted", 1, kInf},
              {"resume", ValueType::String, "\"\"",
               "\"latest\", \"auto\" (latest if there is one, else start fresh) or a step "
               "directory to resume from; \"\" = start fresh"},
              {"verify", ValueType::Bool, "true",
               "read each saved file back (through the writer's read path) and compare its crc32c "
               "before `latest` names the checkpoint; about 0.2 s per GiB from the page cache"},
              {"on_signal",
               ValueType::String,
               "\"save\"",
               "on SIGTERM or SIGINT: finish the step, then save a checkpoint (when every > 0) and "
               "exit 3, or just exit 3",
               -kInf,
               kInf,
               {"save", "exit"}},
          }};
}

CheckpointSettings read_checkpoint(const config::Section& checkpoint) {
  CheckpointSettings c;
  c.dir = checkpoint.str("dir");
  c.resume = checkpoint.str("resume");
  c.every = checkpoint.i64("every");
  c.keep_last = checkpoint.i64("keep_last");
  c.save_on_signal = checkpoint.str("on_signal") == "save";
  c.verify = checkpoint.boolean("verify");
  return c;
}

}  // namespace loom::ckpt
