// A token shard (llm.c's header, uint16 or uint32 ids): opening checks the header and size,
// reading checks every id against the vocabulary.
#include <vector>

#include "data/shards.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = loom::fuzz::write_input("train_000000.bin", data, size);
  loom::fuzz::expect_clean([&] {
    loom::data::TokenShard shard(path, 50257);
    const int64_t n = std::min<int64_t>(shard.size(), 4096);
    std::vector<int32_t> out(static_cast<size_t>(n));
    shard.read(0, n, out.data());
  });
  return 0;
}
