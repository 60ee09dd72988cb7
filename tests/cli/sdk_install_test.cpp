// The plugin boundary as a stranger sees it: install Loom into a prefix, build the installed SDK
// examples against that prefix alone, load them with the installed `loom`, and compile its headers.
#include <doctest/doctest.h>

#include <array>
#include <sstream>
#include <utility>
#include <vector>

#include "support/process.hpp"

using loom::test::sh;
using loom::test::TempDir;

namespace {

// The names a shared object exports (its dynamic symbols defined in it), one per line.
std::string exported(const std::string& library) {
  std::string path = library;
  while (!path.empty() && path.back() == '\n') path.pop_back();
  return sh("nm -D --defined-only " + path + " | awk '{print $NF}'").out;
}

}  // namespace

TEST_CASE("every built-in plugin exports its entry point and nothing else") {
  auto list = sh("ls " LOOM_BINARY_DIR "/lib/loom/plugins/libloom-*.so");
  REQUIRE(list.rc == 0);
  int libraries = 0;
  std::istringstream names(list.out);
  for (std::string library; std::getline(names, library); ++libraries) {
    INFO(library);
    CHECK(exported(library) == "loom_plugin_entry_v3\n");
  }
  CHECK(libraries >= 10);  // fp32, bf16, fp16, fp8, ddp, zero, tp, sp, cp, pp, ep, gloo, ...
}

TEST_CASE("the installed examples build against the installed SDK alone and load") {
  TempDir t;
  std::string prefix = (t.path / "prefix").string(), build = (t.path / "example").string();
  auto install = sh("cmake --install " LOOM_BINARY_DIR " --prefix " + prefix);
  REQUIRE_MESSAGE(install.rc == 0, install.out);

  // The guide is in the prefix beside the examples it walks through.
  auto guide = sh("cat " + prefix + "/share/loom/examples/README.md");
  CHECK(guide.out.find("# Writing a Loom plugin") != std::string::npos);
  CHECK(guide.out.find("loom::sdk::About") != std::string::npos);

  // A copy of the installed example, so nothing relative can reach the sources or the runtime.
  std::string src = (t.path / "src").string();
  REQUIRE(sh("cp -r " + prefix + "/share/loom/examples/tf32-precision " + src).rc == 0);
  auto configure = sh("cmake -S " + src + " -B " + build + " -DCMAKE_PREFIX_PATH=" + prefix +
                      " -DCMAKE_EXPORT_COMPILE_COMMANDS=ON");
  REQUIRE_MESSAGE(configure.rc == 0, configure.out);
  auto compile = sh("cmake --build " + build);
  REQUIRE_MESSAGE(compile.rc == 0, compile.out);
  CHECK(exported(build + "/libloom-precision-tf32.so") == "loom_plugin_entry_v3\n");

  // The only include directory is the installed one.
  auto commands = sh("cat " + build + "/compile_commands.json");
  CHECK(commands.out.find(prefix + "/include") != std::string::npos);
  CHECK(commands.out.find(LOOM_SOURCE_DIR "/runtime") == std::string::npos);
  CHECK(commands.out.find(LOOM_SOURCE_DIR "/sdk") == std::string::npos);

  std::string loom = "LOOM_PLUGIN_PATH=" + build + " " + prefix + "/bin/loom";
  auto list = sh(loom + " plugins");
  CHECK(list.rc == 0);
  CHECK(list.out.find("tf32") != std::string::npos);
  CHECK(list.out.find(build + "/libloom-precision-tf32.so") != std::string::npos);
  CHECK(list.out.find("fp32") != std::string::npos);  // built-ins come from the prefix

  auto info = sh(loom + " plugins info tf32");
  CHECK(info.out.find("mantissa_bits") != std::string::npos);
  CHECK(info.out.find("provides:  option rules") != std::string::npos);

  // Every installed example builds from the prefix alone, as its CMakeLists.txt says.
  for (const auto& [example, plugin, provides] : std::vector<std::array<std::string, 3>>{
           {"ema-data", "ema", "cost entry, state save and load"},
           {"scramble-ckpt", "scramble", "read path"},
           {"counting-comm", "counting", "validate hook"},
           {"local-sgd-data", "local_sgd", "replicas diverge between syncs"},
           {"stochastic-bf16-precision", "sr_bf16", "uses:      loom.step"}}) {
    const std::string copy = (t.path / example).string(),
                      out = (t.path / (example + "-build")).string();
    REQUIRE(sh("cp -r " + prefix + "/share/loom/examples/" + example + " " + copy).rc == 0);
    auto conf = sh("cmake -S " + copy + " -B " + out + " -DCMAKE_PREFIX_PATH=" + prefix);
    REQUIRE_MESSAGE(conf.rc == 0, conf.out);
    auto made = sh("cmake --build " + out);
    REQUIRE_MESSAGE(made.rc == 0, made.out);
    // loom_add_plugin's version script: libstdc++'s weak template copies are not exported.
    CHECK(exported(sh("ls " + out + "/libloom-*.so").out) == "loom_plugin_entry_v3\n");
    auto about = sh("LOOM_PLUGIN_PATH=" + out + " " + prefix + "/bin/loom plugins info " + plugin);
    INFO(example << "\n" << about.out);
    CHECK(about.rc == 0);
    CHECK(about.out.find(out) != std::string::npos);
    CHECK(about.out.find("provides:  ") != std::string::npos);
    CHECK(about.out.find(provides) != std::string::npos);
  }

  std::string cfg =
      t.write("tf32.toml", "[plugins]\nprecision = \"tf32\"\n[plugins.tf32]\nmantisa_bits = 8\n");
  auto check = sh(loom + " config check " + cfg);
  CHECK(check.rc == 2);
  CHECK(check.out.find("did you mean 'mantissa_bits'?") != std::string::npos);
  cfg = t.write("tf32ok.toml",
                "[plugins]\nprecision = \"tf32\"\n[plugins.tf32]\nmantissa_bits = 8\n");
  auto ok = sh(loom + " config check --no-data " + cfg);  // the plugin's options, before any data
  CHECK(ok.rc == 0);
  CHECK(ok.out.find("precision = tf32") != std::string::npos);
  cfg = t.write("tf32far.toml",
                "[plugins]\nprecision = \"tf32\"\n[plugins.tf32]\nmantissa_bits = 30\n");
  auto far =
      sh(loom + " config check " + cfg);  // the example's option rule, checked by the runtime
  CHECK(far.rc == 2);
  CHECK(far.out.find("mantissa_bits") != std::string::npos);
}

// SDK 2 reads every optional member from the plugin's `about` aggregate, so the mistakes that SDK 1
// silently ignored (a misspelt member, a hook of another signature, a member it no longer reads)
// stop the build with a message.
TEST_CASE("a misspelt or mistyped optional member of a plugin is a compile error") {
  TempDir t;
  const std::string head =
      "#include <loom/sdk.hpp>\nstruct P : loom::sdk::ReplicatedDataPlugin {\n";
  const std::string tail =
      "  explicit P(const loom::sdk::Context&) {}\n  void setup(const loom_data_context&) override "
      "{}\n"
      "  void grad_ready(int64_t) override {}\n  void finish_grads(double&, double&) override "
      "{}\n};\n"
      "LOOM_PLUGIN(loom::sdk::data_plugin<P>())\n";
  auto build = [&](const std::string& name, const std::string& body) {
    return sh("c++ -std=c++20 -fsyntax-only -I" LOOM_SOURCE_DIR "/sdk/include " +
              t.write(name + ".cpp", head + body + tail));
  };
  const std::string about =
      "  static constexpr loom::sdk::About about{.name = \"p\", .version = \"1\", .summary = \"s\"";
  auto good = build("good", about + ", .capabilities = LOOM_DATA_PIPELINE};\n");
  CHECK_MESSAGE(good.rc == 0, good.out);
  auto misspelt = build("misspelt", about + ", .capabilites = LOOM_DATA_PIPELINE};\n");
  CHECK(misspelt.rc != 0);
  CHECK(misspelt.out.find("capabilites") != std::string::npos);
  auto mistyped = build("mistyped", "  static void validate(const loom::sdk::Options&) {}\n" +
                                        about + ", .validate = &validate};\n");
  CHECK(mistyped.rc != 0);
  CHECK(mistyped.out.find("validate") != std::string::npos);
  auto unwired = build(
      "unwired", "  static void validate(const loom::sdk::Options&, const loom::sdk::Host&) {}\n" +
                     about + "};\n");
  CHECK(unwired.rc != 0);
  CHECK(unwired.out.find("name it in About::validate") != std::string::npos);
  auto leftover =
      build("leftover",
            "  static constexpr uint64_t capabilities = LOOM_DATA_PIPELINE;\n" + about + "};\n");
  CHECK(leftover.rc != 0);
  CHECK(
      leftover.out.find("capabilities, compute_dtype and exact are not read: set them in About") !=
      std::string::npos);
  auto misplaced = build("misplaced", about + ", .exact = true};\n");
  CHECK(misplaced.rc != 0);
  CHECK(misplaced.out.find("About::exact and compute_dtype are for precision plugins") !=
        std::string::npos);
}

// A source written for ABI 1 derives from SDK 1's DataPlugin: its first error is the one that
// says what replaced it, ahead of the overrides that no longer override.
TEST_CASE("an ABI 1 data plugin's first compile error names SDK 2's two base classes") {
  TempDir t;
  const std::string src =
      t.write("v1.cpp",
              "#include <loom/sdk.hpp>\nclass Old : public loom::sdk::DataPlugin {\n public:\n"
              "  void setup(const loom_data_context&) override {}\n};\n");
  for (const std::string compiler : {"g++", "clang++"}) {
    auto r = sh(compiler + " -std=c++20 -fsyntax-only -I" LOOM_SOURCE_DIR "/sdk/include " + src);
    INFO(compiler << "\n" << r.out);
    CHECK(r.rc != 0);
    const size_t first = r.out.find("error");
    REQUIRE(first != std::string::npos);
    CHECK(r.out.find("loom::sdk::DataPlugin is SDK 1's", first) < r.out.find('\n', first));
    CHECK(r.out.find("ReplicatedDataPlugin") != std::string::npos);
    CHECK(r.out.find("ShardedDataPlugin") != std::string::npos);
  }
}

TEST_CASE(
    "the installed headers compile warning-free as C11 and C++17 under gcc and clang, and a part "
    "alone names its header") {
  TempDir t;
  const std::string prefix = (t.path / "prefix").string();
  auto install = sh("cmake --install " LOOM_BINARY_DIR " --prefix " + prefix);
  REQUIRE_MESSAGE(install.rc == 0, install.out);
  const std::string flags =
      " -Wall -Wextra -Werror -pedantic -I" + prefix + "/include -fsyntax-only ";
  auto compile = [&](const std::string& compiler, const std::string& std, const std::string& header,
                     const std::string& ext) {
    const std::string src =
        t.write("h" + ext, "#include <loom/" + header + ">\nint main(void) { return 0; }\n");
    return sh(compiler + " -std=" + std + flags + src);
  };
  for (const auto& [cc, cxx] :
       {std::pair<std::string, std::string>{"gcc", "g++"}, {"clang", "clang++"}}) {
    for (const auto& [compiler, std, header, ext] :
         std::vector<std::array<std::string, 4>>{{cc, "c11", "plugin.h", ".c"},
                                                 {cxx, "c++17", "plugin.h", ".cpp"},
                                                 {cc, "c11", "types.h", ".c"},
                                                 {cc, "c11", "ops.h", ".c"},
                                                 {cc, "c11", "host.h", ".c"},
                                                 {cxx, "c++17", "host.h", ".cpp"},
                                                 {cxx, "c++17", "bf16.hpp", ".cpp"},
                                                 {cxx, "c++20", "formats.hpp", ".cpp"},
                                                 {cxx, "c++20", "sdk.hpp", ".cpp"}}) {
      auto r = compile(compiler, std, header, ext);
      INFO(compiler << " -std=" << std << " " << header << "\n" << r.out);
      CHECK(r.rc == 0);
      CHECK(r.out.empty());  // not a warning
    }
    for (const auto& [compiler, std, header, ext, says] : std::vector<std::array<std::string, 5>>{
             {cc, "c11", "plugin_parallel.h", ".c", "include <loom/plugin.h> instead"},
             {cxx, "c++20", "sdk_tables.hpp", ".cpp", "include <loom/sdk.hpp> instead"},
             {cxx, "c++17", "sdk.hpp", ".cpp", "is the C++20 layer of the Loom plugin SDK"},
             {cxx, "c++17", "formats.hpp", ".cpp", "<loom/formats.hpp> needs C++20"}}) {
      auto r = compile(compiler, std, header, ext);
      INFO(compiler << " -std=" << std << " " << header << "\n" << r.out);
      CHECK(r.rc != 0);
      CHECK(r.out.find(says) != std::string::npos);
    }
  }
}
