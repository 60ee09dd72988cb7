// The config path: TOML parsing, a --set override (the input's first line), the runtime schema
// with its presets, ranges and choices, the typed settings a job reads (train::read_job), and
// rendering the result back: the rendering of a valid config parses, validates and renders to
// itself, and its settings read as the original's do (an exception or a difference there is a
// finding).
#include "config/config.hpp"
#include "fuzz_input.hpp"
#include "train/job_settings.hpp"

namespace {

// Whether the job's settings read, and if so what they say of the model and the run's length: an
// error names a file line, which the rendering moves, so only its occurrence is compared.
std::string settings_of(const loom::config::Config& c) {
  try {
    const loom::train::JobSettings j = loom::train::read_job(c);
    return j.model.describe() + " steps " + std::to_string(j.train.steps) + " dp " +
           std::to_string(j.parallel.dp) + " " + j.plugins.slot("data");
  } catch (const loom::ConfigError&) {
    return "refused";
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t nl = text.find('\n');
  const std::string first = text.substr(0, nl),
                    rest = nl == std::string::npos ? "" : text.substr(nl + 1);
  std::string rendered, settings;
  loom::fuzz::expect_clean([&] {
    loom::config::Config c = loom::config::Config::parse(rest, "fuzz.toml", {first});
    c.validate(loom::train::job_sections());
    settings = settings_of(c);
    rendered = c.render({});
  });
  // What `config show` prints of a valid config is itself a valid config, printed the same way,
  // whose settings read as the original's.
  if (!rendered.empty()) {
    loom::config::Config again = loom::config::Config::parse(rendered, "fuzz.toml");
    again.validate(loom::train::job_sections());
    FUZZ_REQUIRE(again.render({}) == rendered);
    FUZZ_REQUIRE(settings_of(again) == settings);
  }
  loom::fuzz::expect_clean([&] {
    loom::config::Config c = loom::config::Config::parse(text, "fuzz.toml");
    c.validate(loom::train::job_sections());
  });
  return 0;
}
