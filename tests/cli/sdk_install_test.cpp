// The plugin boundary as a stranger sees it: install Loom into a prefix, build the installed SDK examples
// against that prefix alone, load them with the installed `loom`, and compile its headers.
#include <doctest/doctest.h>

#include <array>
#include <utility>
#include <vector>

#include "support/process.hpp"

using loom::test::sh;
using loom::test::TempDir;

TEST_CASE("the installed examples build against the installed SDK alone and load") {
  TempDir t;
  std::string prefix = (t.path / "prefix").string(), build = (t.path / "example").string();
  auto install = sh("cmake --install " LOOM_BINARY_DIR " --prefix " + prefix);
  REQUIRE_MESSAGE(install.rc == 0, install.out);

  // A copy of the installed example, so nothing relative can reach the sources or the runtime.
  std::string src = (t.path / "src").string();
  REQUIRE(sh("cp -r " + prefix + "/share/loom/examples/tf32-precision " + src).rc == 0);
  auto configure = sh("cmake -S " + src + " -B " + build + " -DCMAKE_PREFIX_PATH=" + prefix +
                      " -DCMAKE_EXPORT_COMPILE_COMMANDS=ON");
  REQUIRE_MESSAGE(configure.rc == 0, configure.out);
  auto compile = sh("cmake --build " + build);
  REQUIRE_MESSAGE(compile.rc == 0, compile.out);

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

  // Every installed example builds from the prefix alone, as its CMakeLists.txt says.
  for (const auto& [example, plugin, provides] : std::vector<std::array<std::string, 3>>{
           {"ema-data", "ema", "cost entry"}, {"scramble-ckpt", "scramble", "read path"},
           {"counting-comm", "counting", "validate hook"}}) {
    const std::string copy = (t.path / example).string(), out = (t.path / (example + "-build")).string();
    REQUIRE(sh("cp -r " + prefix + "/share/loom/examples/" + example + " " + copy).rc == 0);
    auto conf = sh("cmake -S " + copy + " -B " + out + " -DCMAKE_PREFIX_PATH=" + prefix);
    REQUIRE_MESSAGE(conf.rc == 0, conf.out);
    auto made = sh("cmake --build " + out);
    REQUIRE_MESSAGE(made.rc == 0, made.out);
    auto about = sh("LOOM_PLUGIN_PATH=" + out + " " + prefix + "/bin/loom plugins info " + plugin);
    INFO(example << "\n" << about.out);
    CHECK(about.rc == 0);
    CHECK(about.out.find(out) != std::string::npos);
    CHECK(about.out.find("provides:  ") != std::string::npos);
    CHECK(about.out.find(provides) != std::string::npos);
  }

  std::string cfg = t.write("tf32.toml", "[plugins]\nprecision = \"tf32\"\n[plugins.tf32]\nmantisa_bits = 8\n");
  auto check = sh(loom + " config check " + cfg);
  CHECK(check.rc == 2);
  CHECK(check.out.find("did you mean 'mantissa_bits'?") != std::string::npos);
  cfg = t.write("tf32ok.toml", "[plugins]\nprecision = \"tf32\"\n[plugins.tf32]\nmantissa_bits = 8\n");
  auto ok = sh(loom + " config check " + cfg);
  CHECK(ok.rc == 0);
  CHECK(ok.out.find("precision = tf32") != std::string::npos);
}

TEST_CASE("the installed headers compile warning-free as C11 and C++17 under gcc and clang, and a part alone names its header") {
  TempDir t;
  const std::string prefix = (t.path / "prefix").string();
  auto install = sh("cmake --install " LOOM_BINARY_DIR " --prefix " + prefix);
  REQUIRE_MESSAGE(install.rc == 0, install.out);
  const std::string flags = " -Wall -Wextra -Werror -pedantic -I" + prefix + "/include -fsyntax-only ";
  auto compile = [&](const std::string& compiler, const std::string& std, const std::string& header, const std::string& ext) {
    const std::string src = t.write("h" + ext, "#include <loom/" + header + ">\nint main(void) { return 0; }\n");
    return sh(compiler + " -std=" + std + flags + src);
  };
  for (const auto& [cc, cxx] : {std::pair<std::string, std::string>{"gcc", "g++"}, {"clang", "clang++"}}) {
    for (const auto& [compiler, std, header, ext] : std::vector<std::array<std::string, 4>>{
             {cc, "c11", "plugin.h", ".c"}, {cxx, "c++17", "plugin.h", ".cpp"}, {cxx, "c++17", "bf16.hpp", ".cpp"},
             {cxx, "c++20", "sdk.hpp", ".cpp"}}) {
      auto r = compile(compiler, std, header, ext);
      INFO(compiler << " -std=" << std << " " << header << "\n" << r.out);
      CHECK(r.rc == 0);
      CHECK(r.out.empty());  // not a warning
    }
    for (const auto& [compiler, std, header, ext, says] : std::vector<std::array<std::string, 5>>{
             {cc, "c11", "plugin_parallel.h", ".c", "include <loom/plugin.h> instead"},
             {cxx, "c++20", "sdk_tables.hpp", ".cpp", "include <loom/sdk.hpp> instead"},
             {cxx, "c++17", "sdk.hpp", ".cpp", "is the C++20 layer of the Loom plugin SDK"}}) {
      auto r = compile(compiler, std, header, ext);
      INFO(compiler << " -std=" << std << " " << header << "\n" << r.out);
      CHECK(r.rc != 0);
      CHECK(r.out.find(says) != std::string::npos);
    }
  }
}
