// The plugin boundary as a stranger sees it: install Loom into a prefix, build the SDK example
// against that prefix alone, and load it with the installed `loom`.
#include <doctest/doctest.h>

#include "support/process.hpp"

using loom::test::sh;
using loom::test::TempDir;

TEST_CASE("the out-of-tree example builds against the installed SDK and loads") {
  TempDir t;
  std::string prefix = (t.path / "prefix").string(), build = (t.path / "example").string();
  auto install = sh("cmake --install " LOOM_BINARY_DIR " --prefix " + prefix);
  REQUIRE_MESSAGE(install.rc == 0, install.out);

  // A copy of the example outside the source tree, so nothing relative can reach the runtime.
  std::string src = (t.path / "src").string();
  REQUIRE(sh("cp -r " LOOM_SOURCE_DIR "/sdk/examples/tf32-precision " + src).rc == 0);
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

  std::string cfg = t.write("tf32.toml", "[plugins]\nprecision = \"tf32\"\n[plugins.tf32]\nmantisa_bits = 8\n");
  auto check = sh(loom + " config check " + cfg);
  CHECK(check.rc == 2);
  CHECK(check.out.find("did you mean 'mantissa_bits'?") != std::string::npos);
  cfg = t.write("tf32ok.toml", "[plugins]\nprecision = \"tf32\"\n[plugins.tf32]\nmantissa_bits = 8\n");
  auto ok = sh(loom + " config check " + cfg);
  CHECK(ok.rc == 0);
  CHECK(ok.out.find("precision = tf32") != std::string::npos);
}
