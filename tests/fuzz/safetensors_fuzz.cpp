// A safetensors file: the header length, the JSON header, dtypes, shapes and offsets, then every
// tensor read as fp32.
#include "ckpt/safetensors.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = loom::fuzz::write_input("model.safetensors", data, size);
  loom::fuzz::expect_clean([&] {
    for (const auto& [name, entry] : loom::ckpt::read_safetensors_index(path))
      (void)loom::ckpt::read_tensor(name, entry);
  });
  return 0;
}
