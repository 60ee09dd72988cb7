// The [checkpoint] section: declared here and read here, into the settings the checkpointer,
// the trainer and the train command use.
#pragma once

#include <cstdint>
#include <string>

#include "config/schema.hpp"
#include "config/section.hpp"

namespace loom::ckpt {

struct CheckpointSettings {
  std::string dir, resume;
  int64_t every, keep_last;
  bool save_on_signal;  // on_signal = "save"
  bool verify = true;   // read each saved file back and check its crc32c before the commit
  // init_from yields to a resume: "" and "auto" may start fresh, anything else resumes.
  bool may_start_fresh() const { return resume.empty() || resume == "auto"; }
};
CheckpointSettings read_checkpoint(const config::Section& checkpoint);
config::SectionSpec checkpoint_section();

}  // namespace loom::ckpt
