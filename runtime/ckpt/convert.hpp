// Weights from and to other tools: Hugging Face model folders (GPT-2 and Llama families,
// safetensors, single or sharded) and llm.c model files, in Loom's parameter names and layouts.
#pragma once

#include <filesystem>

#include "ckpt/external_model.hpp"
#include "ckpt/format.hpp"

namespace loom::ckpt {

// A Hugging Face folder (config.json + model.safetensors or model.safetensors.index.json) or an
// llm.c model file (magic 20240326, versions 3 fp32 and 5 bf16). Errors name the file and the
// tensor or key at fault.
ExternalModel read_external(const std::filesystem::path& src);

// Refuses a root that already holds checkpoints (an import would move its `latest` to step 0)
// and one that cannot be written. ConfigError / RuntimeError.
void check_import_target(const std::filesystem::path& root);

// Writes `m` as a Loom checkpoint: ROOT/step-00000000 (parameters, zero AdamW moments, one-rank
// layout) and ROOT/latest, ROOT/model.toml with its [model] keys, and its side files in ROOT.
void write_as_checkpoint(const ExternalModel& m, const std::filesystem::path& root);

// A Loom checkpoint as a Hugging Face folder transformers loads with from_pretrained:
// config.json (GPT2LMHeadModel or LlamaForCausalLM) and model.safetensors, and tokenizer.json:
// `tokenizer` when given, otherwise the run's ([data] tokenizer, or the one beside its shards).
void write_hf_folder(const std::filesystem::path& step_dir, const Manifest& m,
                     const std::filesystem::path& out, const std::filesystem::path& tokenizer = {});

}  // namespace loom::ckpt
