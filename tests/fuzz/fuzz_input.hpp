// Shared by the fuzz targets: the errors a parser may throw for bad input (anything else, or a
// crash, is a finding), and a scratch file to hand file-reading parsers their input.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/errors.hpp"

namespace loom::fuzz {

// A directory of this process's own, made once and reused for every input.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("loom-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::filesystem::path write_input(const std::string& name, const uint8_t* data,
                                         size_t size) {
  const std::filesystem::path p = scratch() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p;
}

// A property every input must keep: when it fails, the property is printed and the process traps,
// which libFuzzer reports as a finding with the input that broke it.
#define FUZZ_REQUIRE(cond)                                                                  \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "FUZZ_REQUIRE failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      __builtin_trap();                                                                     \
    }                                                                                       \
  } while (0)

// Runs `f`; the runtime's own error types are the expected answer to bad input.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const loom::ConfigError&) {
  } catch (const loom::UsageError&) {
  } catch (const loom::RuntimeError&) {
  }
}

}  // namespace loom::fuzz
