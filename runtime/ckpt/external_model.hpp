// A model's weights read from another tool's files (ExternalModel): what the converters build
// and what an import writes as a Loom checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::ckpt {

// A model's weights as global fp32 tensors under Loom's names ("h0.attn.qkv.w"), and the
// [model] keys that describe it (TOML lines).
struct ExternalModel {
  std::string source;      // "Hugging Face GPT-2", "llm.c (version 3, fp32)", ...
  std::string model_toml;  // "n_layer = 12\n..."
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::vector<float>> tensors;
  // Files that go beside the checkpoint, by name, with their bytes: a Hugging Face folder's
  // tokenizer.json, tokenizer_config.json, special_tokens_map.json and generation_config.json
  // (written from config.json's bos/eos ids when the folder has none), or a tokenizer named at
  // import. `loom generate` and `loom eval` find them there.
  std::map<std::string, std::string> side_files;
};

}  // namespace loom::ckpt
