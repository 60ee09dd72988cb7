// Test plugins that misbehave in one way each, selected by the macro the build defines.
#include <loom/sdk.hpp>

namespace {

// A precision that leaves every operand in fp32 (the default site format).
struct Base : loom::sdk::PrecisionPlugin {};

#if defined(LOOM_TEST_THROWS)
struct Throws : Base {
  static constexpr loom::sdk::About about{
      .name = "throws", .version = "0.0.1", .summary = "create() throws"};
  explicit Throws(const loom::sdk::Context&) {
    throw loom::sdk::ConfigError("the flux capacitor needs 1.21 gigawatts");
  }
};
LOOM_PLUGIN(loom::sdk::precision_plugin<Throws>())

#elif defined(LOOM_TEST_DECLINES)
struct Declines : Base {
  static int score(const loom::sdk::Host&, std::string& why) {
    why = "needs a device this machine does not have";
    return 0;
  }
  static constexpr loom::sdk::About about{
      .name = "declines", .version = "0.0.1", .summary = "score() is 0", .score = &score};
  explicit Declines(const loom::sdk::Context&) {}
};
LOOM_PLUGIN(loom::sdk::precision_plugin<Declines>())

#elif defined(LOOM_TEST_OPTIONS)
// Declares one option of each type and checks in create() that the host hands them back typed.
struct Options : Base {
  static constexpr loom_option_spec kOptions[] = {
      {"window", LOOM_OPT_INT, "16", "an integer"},
      {"growth", LOOM_OPT_FLOAT, "2.0", "a float"},
      {"enabled", LOOM_OPT_BOOL, "false", "a boolean"},
      {"mode", LOOM_OPT_STRING, "\"max\"", "a string"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom::sdk::About about{.name = "options",
                                          .version = "0.0.1",
                                          .summary = "one option of each type",
                                          .options = kOptions};
  explicit Options(const loom::sdk::Context& ctx) {
    std::string seen = std::to_string(ctx.options.i64("window")) + "," +
                       std::to_string(ctx.options.f64("growth")) + "," +
                       (ctx.options.boolean("enabled") ? "true" : "false") + "," +
                       ctx.options.str("mode");
    // Reports what it read through the error path so a test can assert on it.
    throw loom::sdk::Error(LOOM_UNAVAILABLE, "read " + seen);
  }
};
LOOM_PLUGIN(loom::sdk::precision_plugin<Options>())

#elif defined(LOOM_TEST_RULES)
// Option rules and a validate hook: the runtime checks them before create() and in
// `loom config check`, with no instance.
struct Ruled : Base {
  static constexpr loom_option_spec kOptions[] = {
      {"window", LOOM_OPT_INT, "16", "steps in the window"},
      {"mode", LOOM_OPT_STRING, "\"max\"", "how the window is reduced"},
      {"label", LOOM_OPT_STRING, "\"\"", "a name the user must give"},
      {"low", LOOM_OPT_FLOAT, "0.0", "lower bound"},
      {"high", LOOM_OPT_FLOAT, "1.0", "upper bound"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom_option_rule kRules[] = {
      {"window", 1, 64, nullptr, 0},
      {"mode", 1, 0, "max|min", 0},
      {"label", 1, 0, nullptr, 1},
      {nullptr, 0, 0, nullptr, 0},
  };
  static void validate(const loom::sdk::Options& o, const loom::sdk::Host&) {
    if (o.f64("low") > o.f64("high"))
      throw loom::sdk::ConfigError("low = " + std::to_string(o.f64("low")) +
                                   " is above high = " + std::to_string(o.f64("high")));
  }
  static constexpr loom::sdk::About about{
      .name = "ruled",
      .version = "0.0.1",
      .summary = "options with ranges, choices, a required key and a cross-check",
      .options = kOptions,
      .option_rules = kRules,
      .validate = &validate};
  explicit Ruled(const loom::sdk::Context&) {}
};
LOOM_PLUGIN(loom::sdk::precision_plugin<Ruled>())
#endif

}  // namespace
