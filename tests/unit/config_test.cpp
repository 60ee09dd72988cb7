#include "config/config.hpp"

#include <doctest/doctest.h>

#include "cli/job_config.hpp"
#include "config/section.hpp"
#include "core/errors.hpp"

using loom::ConfigError;
using loom::UsageError;
using loom::config::Config;

namespace {

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    Config c = Config::parse(text, "t.toml", sets);
    c.validate(loom::train::job_sections());
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const UsageError& e) {
    return std::string("usage: ") + e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a syntax error names file, line and column") {
  std::string e = error_of("[run]\nseed = 1\nname = \"unterminated\n");
  CHECK(e.rfind("t.toml:3:", 0) == 0);
}

TEST_CASE("an unknown key names the key, its section and the nearest valid key") {
  std::string e = error_of("[run]\nsede = 4\n");
  CHECK(e == "t.toml:2:1: unknown key 'sede' in [run]; did you mean 'seed'?");
}

TEST_CASE("an unknown section suggests the nearest section") {
  CHECK(error_of("[rnu]\nseed = 1\n") == "t.toml:1:2: unknown section [rnu]; did you mean 'run'?");
  CHECK(error_of("seed = 1\n").find("must be inside a section") != std::string::npos);
}

TEST_CASE("a wrong type names key, expected type and the value given") {
  std::string e = error_of("[run]\nseed = \"forty\"\n");
  CHECK(e == "t.toml:2:8: [run] seed: expected integer, got string 'forty'");
}

TEST_CASE("an out-of-range value names the allowed range") {
  CHECK(error_of("[run]\nthreads = 100000\n") ==
        "t.toml:2:11: [run] threads: expected integer in [0, 4096], got integer 100000");
  CHECK(error_of("[run]\nseed = -3\n") ==
        "t.toml:2:8: [run] seed: expected integer >= 0, got integer -3");
}

TEST_CASE("a value outside a key's choices lists them") {
  std::string e = error_of("[run]\ndevice = \"cdua\"\n");
  CHECK(
      e.find("expected one of \"cpu\", \"strict\", \"cuda\", got \"cdua\"; did you mean 'cuda'?") !=
      std::string::npos);
}

TEST_CASE("defaults are filled in for every declared key") {
  Config c = Config::parse("[run]\nseed = 7\n", "t.toml");
  c.validate(loom::train::job_sections());
  CHECK(c.i64("run.seed") == 7);
  CHECK(c.i64("run.threads") == 0);
  CHECK(c.str("run.device") == "cpu");
  CHECK(c.str("plugins.precision") == "fp32");
  CHECK(c.str_list("plugins.path").empty());
  std::string shown = c.render();
  CHECK(shown.find("seed = 7") != std::string::npos);
  CHECK(shown.find("log_every = 1") != std::string::npos);
}

TEST_CASE("--set overrides any key, creating sections as needed") {
  Config c = Config::parse("[run]\nseed = 7\n", "t.toml",
                           {"run.seed=9", "run.name=plain words", "plugins.path=[\"/x\"]"});
  c.validate(loom::train::job_sections());
  CHECK(c.i64("run.seed") == 9);
  CHECK(c.str("run.name") == "plain words");
  CHECK(c.str_list("plugins.path") == std::vector<std::string>{"/x"});
}

TEST_CASE("--set errors name the assignment") {
  CHECK(error_of("", {"run.seed=-1"}) ==
        "--set run.seed=-1: [run] seed: expected integer >= 0, got integer -1");
  CHECK(error_of("", {"run.sede=1"}).find("unknown key 'sede' in [run]; did you mean 'seed'?") !=
        std::string::npos);
  CHECK(error_of("", {"noequals"}).rfind("usage: --set expects", 0) == 0);
  CHECK(error_of("", {"seed=1"}).rfind("usage: --set expects", 0) == 0);
}

TEST_CASE("plugin option tables are checked against the plugin's schema") {
  Config c = Config::parse("[plugins.fp16]\ninitial_scal = 4\n", "t.toml");
  c.validate(loom::train::job_sections());
  std::vector<loom::config::KeySpec> keys = {
      {"initial_scale", loom::config::ValueType::Float, "65536.0", "first loss scale"},
      {"hysteresis", loom::config::ValueType::Int, "2", "overflows before backing off"}};
  try {
    c.validate_plugin_options("fp16", keys);
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) ==
          "t.toml:2:1: unknown key 'initial_scal' in plugin 'fp16' [plugins.fp16]; did you mean "
          "'initial_scale'?");
  }
  Config ok = Config::parse("[plugins.fp16]\ninitial_scale = 4\n", "t.toml");
  ok.validate(loom::train::job_sections());
  ok.validate_plugin_options("fp16", keys);
  CHECK(ok.f64("plugins.fp16.initial_scale") == 4.0);  // an integer is accepted as a float
  CHECK(ok.i64("plugins.fp16.hysteresis") == 2);
}

TEST_CASE(
    "integers past 2^53 are legal values, not a crash: a huge step count, a seed of 2^53 + 1") {
  // toml++ gives no double for an integer with no exact one; the range check took it anyway.
  CHECK(error_of("[train]\nsteps = 9223372036854775807\n") == "");
  CHECK(error_of("[run]\nseed = 9007199254740993\n") == "");
  Config c =
      Config::parse("[train]\nsteps = 9223372036854775807\nlr = 9007199254740993\n", "t.toml", {});
  CHECK(c.i64("train.steps") == 9223372036854775807LL);
  CHECK(c.f64("train.lr") == 9007199254740992.0);  // the nearest double
  CHECK(error_of("[train]\nlr = 9007199254740993\n").find("expected float in [0, 10]") !=
        std::string::npos);
}

TEST_CASE("a subsection written as a value is named as such, not as an unknown key") {
  CHECK(error_of("[model]\nmoe = 5\n") ==
        "t.toml:2:1: [model] moe must be a table ([model.moe], or moe = { ... }), got integer 5");
}

TEST_CASE("an integer key's range is written as integers") {
  CHECK(error_of("[run]\nthreads = 100000\n") ==
        "t.toml:2:11: [run] threads: expected integer in [0, 4096], got integer 100000");
  CHECK(error_of("[train]\nsteps = 0\n").find("expected integer >= 1, got integer 0") !=
        std::string::npos);
}

// A component's read function sees its own section: keys relative to it, a nested table by its
// dotted key; and the section as TOML text, [plugins] with its option tables, reads back as the
// same values (the planner's cost entries get the tables so).
TEST_CASE("a section reads its own keys, and its TOML text reads back as the same tables") {
  Config c = Config::parse(
      "[train]\nsteps = 7\n[model]\nmoe.experts = 4\n[plugins]\ndata = \"ddp\"\n"
      "[plugins.ddp]\nreduce_dtype = \"bf16\"\n",
      "t.toml");
  c.validate(loom::train::job_sections());
  CHECK(c.section("train").i64("steps") == 7);
  CHECK(c.section("model").i64("moe.experts") == 4);
  CHECK(c.section("plugins").node("missing") == nullptr);
  const Config back = Config::parse(c.section("plugins").toml(), "plugins.toml");
  CHECK(back.str("plugins.data") == "ddp");
  CHECK(back.str("plugins.ddp.reduce_dtype") == "bf16");
}
