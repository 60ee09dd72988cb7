#include "model/model.hpp"

#include "gpt/gpt.hpp"

namespace loom::model {

std::unique_ptr<Model> build(const Config& c, LayerApi& api, ParamStore& params, int64_t max_rows, bool profile,
                             const std::vector<int>& only) {
  return std::make_unique<gpt::Gpt>(c, api, params, max_rows, profile, only);
}

}  // namespace loom::model
