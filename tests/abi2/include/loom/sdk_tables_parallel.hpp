// The descriptor helpers of the parallel slots (tensor, sequence, pipeline, expert, context),
// as <loom/sdk_tables.hpp> has them for the other kinds: each builds, once, the C table of
// <loom/plugin_parallel.h> for a class deriving from the slot's base class in <loom/sdk.hpp>.
// Included by <loom/sdk.hpp>; include that instead.
#pragma once

#ifndef LOOM_SDK_TABLES_FROM_SDK
#error "loom/sdk_tables_parallel.hpp is part of <loom/sdk.hpp>: include <loom/sdk.hpp> instead"
#endif

namespace loom::sdk {

template <class Impl>
const loom_plugin* tensor_plugin() {
  static_assert(detail::check_about<Impl>(LOOM_KIND_PARALLEL));
  static const loom_tensor_v2 table = [] {
    loom_tensor_v2 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_TENSOR, sizeof(loom_tensor_v2));
    t.cost = detail::cost_of<Impl>();
    t.setup = [](void* self, const loom_tensor_context* c, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->setup(*c); });
    };
    t.shard = [](void* self, int32_t role, int32_t ndim, const int64_t* shape, int32_t fused,
                 loom_slice* out, loom_error* e) {
      return detail::guarded(e, [&] {
        *out = static_cast<Impl*>(self)->shard(static_cast<loom_role>(role), ndim, shape, fused);
      });
    };
    t.enter_bwd = [](void* self, loom_tensor* x, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->enter_bwd(*x); });
    };
    t.exit_fwd = [](void* self, loom_tensor* x, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->exit_fwd(*x); });
    };
    t.embedding_fwd = [](void* self, float* out, const int32_t* tok, int64_t N, const float* wte,
                         int64_t vb, int64_t vl, int64_t C, loom_error* e) {
      return detail::guarded(
          e, [&] { static_cast<Impl*>(self)->embedding_fwd(out, tok, N, wte, vb, vl, C); });
    };
    t.embedding_bwd = [](void* self, float* dwte, const float* dout, const int32_t* tok, int64_t N,
                         int64_t vb, int64_t vl, int64_t C, loom_error* e) {
      return detail::guarded(
          e, [&] { static_cast<Impl*>(self)->embedding_bwd(dwte, dout, tok, N, vb, vl, C); });
    };
    t.cross_entropy = [](void* self, float* logits, const int32_t* tgt, int64_t N, int64_t vb,
                         int64_t vl, int64_t vr, float dloss, double* loss, loom_error* e) {
      return detail::guarded(e, [&] {
        *loss = static_cast<Impl*>(self)->cross_entropy(logits, tgt, N, vb, vl, vr, dloss);
      });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* sequence_plugin() {
  static_assert(detail::check_about<Impl>(LOOM_KIND_PARALLEL));
  static const loom_sequence_v2 table = [] {
    loom_sequence_v2 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_SEQUENCE, sizeof(loom_sequence_v2));
    t.cost = detail::cost_of<Impl>();
    t.setup = [](void* self, const loom_tensor_context* c, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->setup(*c); });
    };
    t.gather = [](void* self, const loom_tensor* local, loom_tensor* full, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->gather(*local, *full); });
    };
    t.scatter = [](void* self, const loom_tensor* full, loom_tensor* local, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->scatter(*full, *local); });
    };
    t.reduce_replicated = [](void* self, loom_tensor* g, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->reduce_replicated(*g); });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* pipeline_plugin() {
  static_assert(detail::check_about<Impl>(LOOM_KIND_PARALLEL));
  static const loom_pipeline_v2 table = [] {
    loom_pipeline_v2 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_PIPELINE, sizeof(loom_pipeline_v2));
    t.cost = detail::cost_of<Impl>();
    t.configure = [](void* self, loom_pipeline_shape* shape, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->configure(*shape); });
    };
    t.partition = [](void* self, const loom_pipeline_shape* shape, int32_t n, const char* kinds,
                     const double* costs, const char* layout, int32_t* stage_of, loom_error* e) {
      return detail::guarded(e, [&] {
        auto s = static_cast<Impl*>(self)->partition(*shape, std::string(kinds, n),
                                                     std::vector<double>(costs, costs + n), layout);
        if (s.size() != static_cast<size_t>(n))
          throw Error(LOOM_INTERNAL, "partition size mismatch");
        std::copy(s.begin(), s.end(), stage_of);
      });
    };
    t.schedule = [](void* self, const loom_pipeline_shape* shape, int32_t rank,
                    loom_pipe_action* out, int64_t cap, int64_t* n, loom_error* e) {
      return detail::guarded(e, [&] {
        auto a = static_cast<Impl*>(self)->schedule(*shape, rank);
        if (static_cast<int64_t>(a.size()) > cap)
          throw Error(LOOM_INTERNAL, "schedule longer than cap");
        std::copy(a.begin(), a.end(), out);
        *n = static_cast<int64_t>(a.size());
      });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* expert_plugin() {
  static_assert(detail::check_about<Impl>(LOOM_KIND_PARALLEL));
  static const loom_expert_v2 table = [] {
    loom_expert_v2 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_EXPERT, sizeof(loom_expert_v2));
    t.cost = detail::cost_of<Impl>();
    t.setup = [](void* self, const loom_expert_context* c, int32_t* first, int32_t* count,
                 loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->setup(*c, *first, *count); });
    };
    t.exchange_counts = [](void* self, const int64_t* sent, int64_t* received, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->exchange_counts(sent, received); });
    };
    t.dispatch = [](void* self, const loom_tensor* rows, const int64_t* sent,
                    const int64_t* received, loom_tensor* out, loom_error* e) {
      return detail::guarded(
          e, [&] { static_cast<Impl*>(self)->dispatch(*rows, sent, received, *out); });
    };
    t.combine = [](void* self, const loom_tensor* rows, const int64_t* sent,
                   const int64_t* received, loom_tensor* out, loom_error* e) {
      return detail::guarded(
          e, [&] { static_cast<Impl*>(self)->combine(*rows, sent, received, *out); });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* context_plugin() {
  static_assert(detail::check_about<Impl>(LOOM_KIND_PARALLEL));
  static const loom_context_v2 table = [] {
    loom_context_v2 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_CONTEXT, sizeof(loom_context_v2));
    t.cost = detail::cost_of<Impl>();
    t.setup = [](void* self, const loom_context_context* c, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->setup(*c); });
    };
    t.split = [](void* self, int64_t seq_len, int32_t rank, loom_position_run* runs, int32_t cap,
                 int32_t* n, loom_error* e) {
      return detail::guarded(e, [&] {
        auto r = static_cast<Impl*>(self)->split(seq_len, rank);
        if (static_cast<int64_t>(r.size()) > cap)
          throw Error(LOOM_INTERNAL, "more position runs than cap");
        std::copy(r.begin(), r.end(), runs);
        *n = static_cast<int32_t>(r.size());
      });
    };
    t.attention_fwd = [](void* self, const loom_attention_args* a, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->attention_fwd(*a); });
    };
    t.attention_bwd = [](void* self, const loom_attention_args* a, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->attention_bwd(*a); });
    };
    t.stats = [](void* self, double* compute_ms, double* exposed_ms, int64_t* bytes,
                 loom_error* e) {
      return detail::guarded(
          e, [&] { static_cast<Impl*>(self)->stats(*compute_ms, *exposed_ms, *bytes); });
    };
    return t;
  }();
  return &table.base;
}

}  // namespace loom::sdk
