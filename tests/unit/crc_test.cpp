#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ckpt/crc32c.hpp"

TEST_CASE(
    "crc32c: the standard check value, and the fast path agrees with the table at every length") {
  const std::string check = "123456789";
  CHECK(loom::ckpt::crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(loom::ckpt::crc32c_table(check.data(), check.size()) == 0xE3069283u);
  std::vector<unsigned char> bytes(1031);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t n : {0, 1, 7, 8, 9, 64, 1031})
    CHECK(loom::ckpt::crc32c(bytes.data(), n) == loom::ckpt::crc32c_table(bytes.data(), n));
}
