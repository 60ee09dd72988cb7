// Host tensors' blocks kept for reuse (tensor/host_blocks.hpp): a step's temporaries come back
// at the same addresses, already faulted in, and the tensors' accounting counts only what is held.
#include "tensor/host_blocks.hpp"

#include <doctest/doctest.h>

#include "tensor/tensor.hpp"

using namespace loom;

TEST_CASE("a freed host block of a cached size is handed out again for the same size only") {
  host_blocks::release_cached();
  const size_t big = host_blocks::kMinCached + 4096;
  void* a = host_blocks::take(big);
  REQUIRE(a != nullptr);
  host_blocks::give(a, big);
  CHECK(host_blocks::cached_bytes() == static_cast<int64_t>(big));
  void* other = host_blocks::take(big + 64);  // another size: a new block
  CHECK(other != a);
  CHECK(host_blocks::take(big) == a);
  CHECK(host_blocks::cached_bytes() == 0);
  host_blocks::give(other, big + 64);
  host_blocks::give(a, big);
  host_blocks::release_cached();
  CHECK(host_blocks::cached_bytes() == 0);
}

TEST_CASE("host tensors reuse a freed block, and the peak counts tensors held, not the cache") {
  host_blocks::release_cached();
  const std::vector<int64_t> shape{512, 1024};  // 2 MiB of fp32
  mark_heap_tensor_peak();
  const int64_t before = heap_tensor_peak_since_mark();
  void* first = nullptr;
  {
    Tensor t = Tensor::empty(shape);
    first = t.data();
    CHECK(heap_tensor_peak_since_mark() - before == 2 << 20);
  }
  CHECK(host_blocks::cached_bytes() == 2 << 20);
  mark_heap_tensor_peak();  // from what is held now: the cached block is not a tensor's
  CHECK(heap_tensor_peak_since_mark() == before);
  Tensor again = Tensor::empty(shape, LOOM_BF16);  // 1 MiB: another size
  Tensor same = Tensor::empty(shape);
  CHECK(same.data() == first);
  CHECK(again.data() != first);
  CHECK(heap_tensor_peak_since_mark() - before == (2 << 20) + (1 << 20));
}
