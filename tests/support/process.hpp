// Runs a shell command for a test and captures what it printed (stdout and stderr together).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

namespace loom::test {

struct Result {
  int rc = -1;
  std::string out;
};

inline Result sh(const std::string& command) {
  Result r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The loom binary under test, with the misbehaving test plugins on the search path; `launcher`
// goes in front of it ("mpirun -np 2", "srun -n 2").
inline Result run_loom(const std::string& args, const std::string& env = "",
                       const std::string& launcher = "") {
  return sh(env + " LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR " " + launcher + " " LOOM_BIN " " +
            args);
}

// mpirun as the tests use it: allowed as root, more ranks than cores, loopback only.
inline std::string mpirun(int n) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np " +
         std::to_string(n) +
         " --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo";
}

// How many times `part` occurs in `text` (rows of a metrics file, events, elements of a page).
inline size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// What `f` throws, or "" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A file's whole contents ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh temporary directory, removed when the object goes away.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "loom-test-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

}  // namespace loom::test
