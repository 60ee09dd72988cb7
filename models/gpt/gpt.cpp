#include "gpt/gpt.hpp"

#include <algorithm>

#include "core/errors.hpp"

namespace loom::gpt {

Gpt::Gpt(const model::Config& c, LayerApi& api, ParamStore& ps, int64_t max_rows, bool profile,
         const std::vector<int>& only)
    : c_(c), api_(api) {
  // The layout's fit to this model (heads, d_ff and rows over tp, MoE without sp) is checked before
  // any rank builds it: train::layout_problem, which `loom config check` and `loom plan` share.
  const int tp = api.tp_size();
  if (c_.n_head % tp || c_.kv_heads() % tp || c_.d_ff % tp)
    throw RuntimeError("a tp that does not split the heads and d_ff got past layout_problem");
  {
    TensorPurpose purpose("the layers' shared scratch");
    scratch_ = std::make_unique<Scratch>(c_, max_rows);
  }
  if (c_.rope()) {
    TensorPurpose purpose("the RoPE tables");
    rope_ = std::make_unique<RopeTables>(c_);
  }
  if (c_.recompute != "none") {
    TensorPurpose purpose("the recomputation scratch");
    recompute_ = std::make_unique<RecomputeScratch>(c_, max_rows);
  }
  const int last = static_cast<int>(c_.n_layer) + 1;
  auto builds = [&](int n) {
    return only.empty() || std::find(only.begin(), only.end(), n) != only.end();
  };
  Param* tied = nullptr;
  if (builds(0)) {
    TensorPurpose purpose("the embedding's buffers");
    auto emb = std::make_unique<Embedding>(c_, api, ps);
    if (c_.tied_embeddings) tied = &emb->wte();
    layers_.push_back(std::move(emb));
    numbers_.push_back(0);
  }
  // recompute_layers counts from the first block of each contiguous run this rank builds (a
  // pipeline chunk).
  int64_t in_chunk = 0;
  for (int i = 0; i < c_.n_layer; ++i)
    if (builds(i + 1)) {
      in_chunk = i > 0 && builds(i) ? in_chunk + 1 : 0;
      const bool recomputes =
          recompute_ && (c_.recompute_layers == 0 || in_chunk < c_.recompute_layers);
      TensorPurpose purpose("block " + std::to_string(i) + "'s buffers");
      layers_.push_back(std::make_unique<Block>(i, c_, api, ps, *scratch_, max_rows, rope_.get(),
                                                recomputes ? recompute_.get() : nullptr, profile));
      numbers_.push_back(i + 1);
    }
  if (builds(last)) {
    TensorPurpose purpose("the head's buffers (logits)");
    auto head = std::make_unique<Head>(c_, api, ps, tied, *scratch_, max_rows);
    head_ = head.get();
    layers_.push_back(std::move(head));
    numbers_.push_back(last);
  }
  TensorPurpose purpose("the residual stream and its gradient");
  x_ = Tensor::empty({max_rows, c_.d_model});
  dx_ = Tensor::empty({max_rows, c_.d_model});
}

int64_t Gpt::activation_bytes(const Microbatch& mb) const {
  int64_t total = 0;
  for (const auto& l : layers_) total += l->saved_bytes(mb);
  return total + (recompute_ ? recompute_->bytes() : 0);
}

double Gpt::head_loss() const { return head_ ? head_->loss_sum() : 0.0; }

std::vector<std::pair<std::string, MoeMlp*>> Gpt::moe_layers() const {
  std::vector<std::pair<std::string, MoeMlp*>> out;
  for (const auto& l : layers_)
    if (auto* b = dynamic_cast<Block*>(l.get()); b && b->moe())
      out.push_back({"h" + l->name().substr(5), b->moe()});
  return out;
}

std::vector<std::pair<std::string, model::RoutedLayer*>> Gpt::routed_layers() const {
  std::vector<std::pair<std::string, model::RoutedLayer*>> out;
  for (auto& [name, moe] : moe_layers()) out.push_back({name, moe});
  return out;
}

double Gpt::aux_objective() const {
  double sum = 0;
  for (const auto& [name, moe] : moe_layers()) sum += moe->aux_objective();
  return sum;
}

void Gpt::use_slot(int k, size_t first, size_t last) {
  for (size_t i = first; i < last; ++i) {
    TensorPurpose purpose("layer " + std::to_string(numbers_[i]) + "'s saved activations (slot " +
                          std::to_string(k) + ")");
    layers_[i]->use_slot(k);
  }
}

void Gpt::forward_range(const Microbatch& mb, Tensor& x, size_t first, size_t last) {
  if (mb.rows() > x_.dim(0) || mb.T > c_.seq_len)
    throw RuntimeError("micro-batch of " + std::to_string(mb.B) + " x " + std::to_string(mb.T) +
                       " exceeds the model's activation capacity");
  for (size_t i = first; i < last; ++i) {
    if (hooks_) hooks_->before_forward(i);
    layers_[i]->forward(mb, x);
    if (hooks_) hooks_->after_forward(i);
  }
}

void Gpt::backward_range(const Microbatch& mb, Tensor& dx, size_t first, size_t last,
                         const std::function<void(size_t)>& after_layer) {
  for (size_t i = last; i-- > first;) {
    if (hooks_) hooks_->before_backward(i);
    layers_[i]->backward(mb, dx);
    api_.flush_weight_grads();
    if (hooks_) hooks_->after_backward(i);
    if (after_layer) after_layer(i);
  }
}

void Gpt::backward_input_range(const Microbatch& mb, Tensor& dx, size_t first, size_t last,
                               std::vector<DeferredWeightGrads>& deferred) {
  deferred.resize(last - first);
  for (size_t i = last; i-- > first;) {
    if (hooks_) hooks_->before_backward(i);
    deferred[i - first].clear();
    api_.defer_weight_grads(&deferred[i - first]);
    try {
      layers_[i]->backward(mb, dx);
    } catch (...) {
      api_.defer_weight_grads(nullptr);
      throw;
    }
    api_.defer_weight_grads(nullptr);
    if (hooks_) hooks_->after_backward_input(i);
  }
}

// Layers in the backward's order, as an unsplit backward would finish them.
void Gpt::weight_range(std::vector<DeferredWeightGrads>& deferred, size_t first, size_t last,
                       const std::function<void(size_t)>& after_layer) {
  for (size_t i = last; i-- > first;) {
    if (hooks_) hooks_->before_backward_weight(i);
    for (const DeferredWeightGrad& d : deferred[i - first]) api_.weight_grad(d);
    if (hooks_) hooks_->after_backward_weight(i);
    if (after_layer) after_layer(i);
  }
}

double Gpt::forward(const Microbatch& mb) {
  if (numbers_.size() != static_cast<size_t>(c_.n_layer + 2))
    throw RuntimeError("this rank holds one pipeline stage, not the whole model");
  Tensor x = x_.rows(0, api_.local_rows(mb.rows()));
  forward_range(mb, x, 0, layers_.size());
  return head_->loss_sum();
}

void Gpt::use_kv_cache(int64_t capacity) {
  std::vector<Block*> blocks;
  for (auto& l : layers_)
    if (auto* b = dynamic_cast<Block*>(l.get())) blocks.push_back(b);
  kv_.assign(capacity > 0 ? blocks.size() : 0, KvCache{});
  const int64_t W = c_.kv_heads() * c_.head_dim() / api_.tp_size();
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (capacity > 0)
      kv_[i].k = Tensor::zeros({capacity, W}), kv_[i].v = Tensor::zeros({capacity, W});
    blocks[i]->set_kv_cache(capacity > 0 ? &kv_[i] : nullptr);
  }
}

// In pieces of at most max_rows() tokens: the cache carries the earlier ones.
void Gpt::decode(const int32_t* tokens, int64_t n) {
  if (kv_.empty()) throw RuntimeError("decode needs use_kv_cache first");
  for (int64_t done = 0; done < n;) {
    const int64_t part = std::min(n - done, max_rows());
    api_.set_position_offset(decoded());
    forward({tokens + done, nullptr, 1, part, 0.f});
    done += part;
  }
  api_.set_position_offset(0);
}

void Gpt::backward(const Microbatch& mb, const std::function<void(size_t)>& after_layer) {
  Tensor dx = dx_.rows(0, api_.local_rows(mb.rows()));
  backward_range(mb, dx, 0, layers_.size(), after_layer);
}

}  // namespace loom::gpt

namespace loom::model {

// The one place that names the implementation of model::Model.
std::unique_ptr<Model> build(const Config& c, LayerApi& api, ParamStore& params, int64_t max_rows,
                             bool profile, const std::vector<int>& only) {
  return std::make_unique<gpt::Gpt>(c, api, params, max_rows, profile, only);
}

}  // namespace loom::model
