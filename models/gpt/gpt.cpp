#include "gpt/gpt.hpp"

#include "core/errors.hpp"

namespace loom::gpt {

Gpt::Gpt(const GptConfig& c, LayerApi& api, ParamStore& ps, int64_t max_rows, bool profile)
    : c_(c), api_(api) {
  const int tp = api.tp_size();
  if (c_.n_head % tp != 0)
    throw ConfigError("[model] n_head = " + std::to_string(c_.n_head) +
                      " is not divisible by [parallel] tp = " + std::to_string(tp));
  if (c_.d_ff % tp != 0)
    throw ConfigError("[model] d_ff = " + std::to_string(c_.d_ff) +
                      " is not divisible by [parallel] tp = " + std::to_string(tp));
  if (api.local_rows(c_.seq_len * tp) != c_.seq_len * tp && c_.seq_len % tp != 0)
    throw ConfigError("[model] seq_len = " + std::to_string(c_.seq_len) +
                      " is not divisible by [parallel] tp = " + std::to_string(tp) +
                      " (sequence parallelism splits it)");
  scratch_ = std::make_unique<Scratch>(c_, max_rows);
  auto emb = std::make_unique<Embedding>(c_, api, ps);
  Param* tied = c_.tied_embeddings ? &emb->wte() : nullptr;
  layers_.push_back(std::move(emb));
  for (int i = 0; i < c_.n_layer; ++i)
    layers_.push_back(std::make_unique<Block>(i, c_, api, ps, *scratch_, max_rows, profile));
  auto head = std::make_unique<Head>(c_, api, ps, tied, max_rows);
  head_ = head.get();
  layers_.push_back(std::move(head));
  x_ = Tensor::empty({max_rows, c_.d_model});
  dx_ = Tensor::empty({max_rows, c_.d_model});
}

int64_t Gpt::activation_bytes(const Microbatch& mb) const {
  int64_t total = 0;
  for (const auto& l : layers_) total += l->saved_bytes(mb);
  return total;
}

double Gpt::forward(const Microbatch& mb) {
  if (mb.rows() > x_.dim(0) || mb.T > c_.seq_len)
    throw RuntimeError("micro-batch of " + std::to_string(mb.B) + " x " + std::to_string(mb.T) +
                       " exceeds the model's activation capacity");
  Tensor x = x_.rows(0, api_.local_rows(mb.rows()));
  for (auto& l : layers_) l->forward(mb, x);
  return head_->loss_sum();
}

void Gpt::backward(const Microbatch& mb, const std::function<void(size_t)>& after_layer) {
  Tensor dx = dx_.rows(0, api_.local_rows(mb.rows()));
  for (size_t i = layers_.size(); i-- > 0;) {
    layers_[i]->backward(mb, dx);
    if (after_layer) after_layer(i);
  }
}

}  // namespace loom::gpt
