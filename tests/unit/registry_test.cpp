#include "loader/registry.hpp"

#include <doctest/doctest.h>

#include <algorithm>

#include "config/config.hpp"
#include "core/errors.hpp"
#include "loader/selection.hpp"

using namespace loom;
using namespace loom::plugins;

namespace {

Registry test_registry() {
  return Registry({{LOOM_TEST_PLUGIN_DIR, "test"}, {Registry::install_dir(), "install"}});
}

template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no error>";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("built-in plugins are found by name in the install directory") {
  Registry reg = test_registry();
  Found f = reg.find("fp32", LOOM_KIND_PRECISION);
  CHECK(std::string(f.desc->name) == "fp32");
  CHECK(f.desc->kind == LOOM_KIND_PRECISION);
  CHECK(f.library.filename() == "libloom-precision-fp32.so");
  CHECK(reg.find(f.library.string()).desc == f.desc);  // a path works as a name, same library
}

TEST_CASE("a missing plugin lists the directories searched and the plugins found") {
  Registry reg = test_registry();
  std::string e = message_of<ConfigError>([&] { reg.find("fp33", LOOM_KIND_PRECISION); });
  CHECK(has(e, "no precision plugin named 'fp33'; did you mean 'fp32'?"));
  CHECK(has(e, std::string(LOOM_TEST_PLUGIN_DIR) + " (test)"));
  CHECK(has(e, Registry::install_dir().string() + " (install)"));
  CHECK(has(e, "fp32 (precision)"));
  CHECK(has(e, "skipped:"));  // the broken test libraries are reported, not hidden
}

TEST_CASE("a plugin built for another ABI major names both versions") {
  Registry reg = test_registry();
  std::string future = message_of<RuntimeError>(
      [&] { reg.load(std::string(LOOM_TEST_PLUGIN_DIR) + "/libloom-precision-future.so"); });
  CHECK(has(future,
            "is returned by loom_plugin_entry_v3 but claims plugin ABI 99.3; this runtime speaks "
            "ABI 3.0 (and loads ABI 1 and 2 through adapters)"));
  std::string next = message_of<RuntimeError>(
      [&] { reg.load(std::string(LOOM_TEST_PLUGIN_DIR) + "/libloom-precision-nextmajor.so"); });
  CHECK(has(next, "was built for Loom plugin ABI 4 (exports loom_plugin_entry_v4)"));
  CHECK(has(next, "this runtime speaks ABI 3.0"));
}

TEST_CASE("a descriptor smaller than its kind's table is refused, not read past its end") {
  Registry reg = test_registry();
  std::string e = message_of<RuntimeError>(
      [&] { reg.load(std::string(LOOM_TEST_PLUGIN_DIR) + "/libloom-precision-short.so"); });
  CHECK(has(e, "plugin 'short'"));
  // ABI 2.0's comm table ends at wait; 2.4 appended group_start, group_end and capabilities.
  CHECK(has(e, "-byte comm table; ABI 2.0's is " +
                   std::to_string(offsetof(loom_comm_v2, group_start)) + " bytes"));
}

TEST_CASE("a shared library that is not a Loom plugin says so") {
  Registry reg = test_registry();
  std::string e = message_of<RuntimeError>(
      [&] { reg.load(std::string(LOOM_TEST_PLUGIN_DIR) + "/libloom-precision-notaplugin.so"); });
  CHECK(has(e,
            "is not a Loom plugin: it exports no loom_plugin_entry_v3 (or _v2, _v1) "
            "symbol"));
}

TEST_CASE("a plugin's own message from create() reaches the user") {
  Registry reg = test_registry();
  Found f = reg.find("throws", LOOM_KIND_PRECISION);
  // A ConfigError thrown inside the plugin comes back as one: the user's config is at fault.
  std::string e = message_of<ConfigError>([&] { Instance i(f, nullptr); });
  CHECK(e ==
        "plugin 'throws' failed to start: bad config: the flux capacitor needs 1.21 gigawatts");
}

TEST_CASE("score() == 0 reports that the plugin cannot run here, with its reason") {
  Registry reg = test_registry();
  Found f = reg.find("declines", LOOM_KIND_PRECISION);
  std::string e = message_of<RuntimeError>([&] { Instance i(f, nullptr); });
  CHECK(e == "plugin 'declines' cannot run here: needs a device this machine does not have");
}

TEST_CASE("a plugin reads its validated options, defaults filled, through the host") {
  Registry reg = test_registry();
  config::Config cfg = config::Config::parse(
      "[plugins]\nprecision = \"options\"\n[plugins.options]\nwindow = 3\nmode = \"most_recent\"\n",
      "t.toml");
  Selection sel = resolve(cfg, reg);
  REQUIRE(sel.slot("precision") != nullptr);
  loom_options opts = options_for(cfg, "options");
  std::string e =
      message_of<RuntimeError>([&] { Instance i(sel.slot("precision")->found, &opts); });
  CHECK(has(e, "read 3,2.000000,false,most_recent"));
}

TEST_CASE("a plugin's option table rejects unknown keys and wrong types") {
  Registry reg = test_registry();
  auto check = [&](const std::string& text) {
    return message_of<ConfigError>([&] {
      config::Config cfg = config::Config::parse(text, "t.toml");
      resolve(cfg, reg);
    });
  };
  CHECK(check("[plugins.options]\nwindw = 3\n") ==
        "t.toml:2:1: unknown key 'windw' in plugin 'options' [plugins.options]; did you mean "
        "'window'?");
  CHECK(check("[plugins.options]\nenabled = 1\n") ==
        "t.toml:2:11: plugin 'options' [plugins.options] enabled: expected boolean, got integer 1");
  CHECK(has(check("[plugins.optoins]\n"), "no plugin named 'optoins'; did you mean 'options'?"));
  CHECK(has(check("[plugins]\ndata = \"fp32\"\n"), "no parallel plugin named 'fp32'"));
}

TEST_CASE("listing every plugin keeps going past broken libraries") {
  Registry reg = test_registry();
  std::vector<std::string> problems;
  std::vector<Found> all = reg.all(&problems);
  std::vector<std::string> names;
  for (const auto& f : all) names.push_back(f.desc->name);
  CHECK(std::find(names.begin(), names.end(), "fp32") != names.end());
  CHECK(std::find(names.begin(), names.end(), "options") != names.end());
  CHECK(problems.size() == 4);  // future, nextmajor, notaplugin, short
}
