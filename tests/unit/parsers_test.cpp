// Inputs the fuzzers (tests/fuzz) found or aimed at, kept as plain regression cases: each must be
// an error that names what is wrong, never a crash or a bare library exception.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "ckpt/format.hpp"
#include "ckpt/safetensors.hpp"
#include "core/errors.hpp"
#include "loader/descriptor.hpp"
#include "support/process.hpp"

using loom::test::error_of;

namespace {

loom_status create(const loom_host*, const loom_options*, void**, loom_error*) { return LOOM_OK; }
void destroy(void*) {}

// A safetensors file of one header and 8 bytes of data.
void write_safetensors(const std::filesystem::path& path, const std::string& header) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(8, '\0');
}

}  // namespace

TEST_CASE(
    "a safetensors header entry without data_offsets is a named error, not a JSON exception") {
  const std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}";
  const auto path = std::filesystem::temp_directory_path() / "loom-parsers-test.safetensors";
  write_safetensors(path, header);
  const std::string e = error_of([&] { loom::ckpt::read_safetensors_index(path); });
  CHECK(e.find("tensor w: header entry is damaged") != std::string::npos);
  CHECK(e.find(path.string()) != std::string::npos);
  std::filesystem::remove(path);
}

// The manifest fuzzer's finding: a float where an integer belongs was cast (UB past int64).
TEST_CASE(
    "a manifest or safetensors integer that is a huge float, a fraction or out of range is a named "
    "error") {
  const auto dir = std::filesystem::temp_directory_path() / "loom-parsers-test-ckpt";
  std::filesystem::create_directories(dir);
  for (const char* step : {"1e300", "2.5", "-1e30", "18446744073709551615"}) {
    std::ofstream(dir / "manifest.json")
        << "{\"format\":\"loom-checkpoint-1\",\"step\":" << step << ",\"applied\":0}";
    const std::string e = error_of([&] { loom::ckpt::read_manifest(dir); });
    CAPTURE(step);
    CHECK(e.find("is damaged: \"step\" is") != std::string::npos);
    CHECK(e.find("not an integer") != std::string::npos);
  }
  std::ofstream(dir / "manifest.json")
      << "{\"format\":\"loom-checkpoint-1\",\"step\":4.0,\"applied\":1e300}";
  CHECK(error_of([&] { loom::ckpt::read_manifest(dir); }).find("\"applied\" is 1e+300") !=
        std::string::npos);
  std::filesystem::remove_all(dir);

  const std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}";
  const auto path = std::filesystem::temp_directory_path() / "loom-parsers-test-float.safetensors";
  write_safetensors(path, header);
  const std::string e = error_of([&] { loom::ckpt::read_safetensors_index(path); });
  CHECK(e.find("tensor w: header entry is damaged: \"shape\" is 1e+300, not an integer") !=
        std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE(
    "descriptors with an unknown kind, a slot their kind cannot have or a doubled option are "
    "refused") {
  loom_precision_v2 t{};
  t.base.v = LOOM_VERSION_OF(loom_precision_v2);
  t.base.kind = LOOM_KIND_PRECISION;
  t.base.name = "p";
  t.base.create = &create;
  t.base.destroy = &destroy;
  CHECK(error_of([&] {
          loom::plugins::check_descriptor(&t.base, "x.so");
        }).find("leaves add_site or site_format NULL") != std::string::npos);
  t.exact = 1;
  CHECK(error_of([&] { loom::plugins::check_descriptor(&t.base, "x.so"); }).empty());
  t.base.kind = 9;
  CHECK(error_of([&] {
          loom::plugins::check_descriptor(&t.base, "x.so");
        }).find("unknown kind 9") != std::string::npos);
  t.base.kind = LOOM_KIND_PRECISION;
  t.base.slot = LOOM_SLOT_DATA;
  CHECK(error_of([&] {
          loom::plugins::check_descriptor(&t.base, "x.so");
        }).find("which a precision plugin cannot have") != std::string::npos);
  t.base.slot = LOOM_SLOT_NONE;
  const loom_option_spec twice[] = {
      {"a", LOOM_OPT_INT, "1", ""}, {"a", LOOM_OPT_INT, "2", ""}, {nullptr, 0, nullptr, nullptr}};
  t.base.options = twice;
  CHECK(error_of([&] {
          loom::plugins::check_descriptor(&t.base, "x.so");
        }).find("declares option 'a' twice") != std::string::npos);
  const loom_option_spec wordy[] = {{"n", LOOM_OPT_INT, "four", ""},
                                    {nullptr, 0, nullptr, nullptr}};
  t.base.options = wordy;
  CHECK(error_of([&] {
          loom::plugins::check_descriptor(&t.base, "x.so");
        }).find("declares option 'n' with the default four, which is not an integer") !=
        std::string::npos);
  const loom_option_spec typeless[] = {{"b", 7, "1", ""}, {nullptr, 0, nullptr, nullptr}};
  t.base.options = typeless;
  CHECK(error_of([&] {
          loom::plugins::check_descriptor(&t.base, "x.so");
        }).find("of unknown type 7") != std::string::npos);
}
