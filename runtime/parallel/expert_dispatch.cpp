#include "parallel/expert_dispatch.hpp"

#include <numeric>

#include "core/errors.hpp"
#include "loader/host.hpp"

namespace loom {

using plugins::check;

int64_t ExpertRoute::rows_in() const {
  return std::accumulate(sent.begin(), sent.end(), int64_t{0});
}

ExpertDispatch::ExpertDispatch(const loom_expert_context& ctx, plugins::Instance& plugin)
    : t_(plugin.table<loom_expert_v2>()), self_(plugin.self()) {
  loom_error e;
  int32_t first = 0, count = 0;
  check(t_->setup(self_, &ctx, &first, &count, &e), e, "expert plugin setup");
  const int ep = ctx.comm->size(ctx.comm_self, ctx.ep);
  if (count <= 0 || first < 0 || first + count > ctx.experts || count * ep != ctx.experts)
    throw RuntimeError("expert plugin placed experts [" + std::to_string(first) + ", " +
                       std::to_string(first + count) + ") of " + std::to_string(ctx.experts) +
                       " on this rank: each of the " + std::to_string(ep) +
                       " ep ranks must hold an equal, contiguous block");
  first_ = first, count_ = count;
}

void ExpertDispatch::exchange(ExpertRoute& route) {
  const int64_t ep = static_cast<int64_t>(route.sent.size()) / count_;
  route.received.assign(ep * count_, 0);
  loom_error e;
  check(t_->exchange_counts(self_, route.sent.data(), route.received.data(), &e), e,
        "ep count exchange");
  route.first.assign(count_ + 1, 0);
  for (int j = 0; j < count_; ++j) {
    route.first[j + 1] = route.first[j];
    for (int64_t s = 0; s < ep; ++s) route.first[j + 1] += route.received[s * count_ + j];
  }
}

void ExpertDispatch::dispatch(const ExpertRoute& route, const Tensor& rows, Tensor& out) {
  loom_tensor in = rows.desc(), o = out.desc();
  loom_error e;
  check(t_->dispatch(self_, &in, route.sent.data(), route.received.data(), &o, &e), e,
        "ep dispatch");
}

void ExpertDispatch::combine(const ExpertRoute& route, const Tensor& rows, Tensor& out) {
  loom_tensor in = rows.desc(), o = out.desc();
  loom_error e;
  check(t_->combine(self_, &in, route.sent.data(), route.received.data(), &o, &e), e, "ep combine");
}

}  // namespace loom
