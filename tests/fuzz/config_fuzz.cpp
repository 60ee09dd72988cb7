// The config path: TOML parsing, a --set override (the input's first line), the runtime schema
// with its presets, ranges and choices, and rendering the result back: the rendering of a valid
// config parses, validates and renders to itself (an exception or a difference there is a finding).
#include "cli/sections.hpp"
#include "config/config.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t nl = text.find('\n');
  const std::string first = text.substr(0, nl),
                    rest = nl == std::string::npos ? "" : text.substr(nl + 1);
  std::string rendered;
  loom::fuzz::expect_clean([&] {
    loom::config::Config c = loom::config::Config::parse(rest, "fuzz.toml", {first});
    c.validate(loom::cli::runtime_schema());
    rendered = c.render({});
  });
  // What `config show` prints of a valid config is itself a valid config, printed the same way.
  if (!rendered.empty()) {
    loom::config::Config again = loom::config::Config::parse(rendered, "fuzz.toml");
    again.validate(loom::cli::runtime_schema());
    if (again.render({}) != rendered) __builtin_trap();
  }
  loom::fuzz::expect_clean([&] {
    loom::config::Config c = loom::config::Config::parse(text, "fuzz.toml");
    c.validate(loom::cli::runtime_schema());
  });
  return 0;
}
