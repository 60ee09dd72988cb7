// A checkpoint manifest as a damaged or hand-edited file would be: read_manifest must name what
// is wrong, and coverage must be checkable on whatever it accepted.
#include "ckpt/format.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::write_input("manifest.json", data, size);
  loom::fuzz::expect_clean([&] {
    const loom::ckpt::Manifest m = loom::ckpt::read_manifest(loom::fuzz::scratch());
    loom::ckpt::check_coverage(loom::fuzz::scratch(), m);
  });
  return 0;
}
