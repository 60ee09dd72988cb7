// [model] init_from: a run's starting weights from a Loom checkpoint of any layout, a Hugging Face
// folder or an llm.c model file. Only the weights: the step count and AdamW start fresh.
#pragma once

#include <filesystem>

#include "ckpt/convert.hpp"
#include "model/params.hpp"

namespace loom::ckpt {

// Fills every parameter this rank holds from the source's global tensor of the same name.
// Throws naming the source and the tensor when one is missing or shaped otherwise (the
// vocabulary's padding rows excepted) and prints what the source's model is.
void init_from(const std::filesystem::path& src, ParamStore& params, bool verbose);
// The same from weights already read (read_external), so a caller that needed the source's
// model description first does not read the weights twice.
void init_from(const std::filesystem::path& src, const ExternalModel& weights, ParamStore& params,
               bool verbose);

}  // namespace loom::ckpt
