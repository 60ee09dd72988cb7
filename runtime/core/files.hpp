// Opening input files with messages that say what is wrong: missing, a directory, not readable.
// (Reading a directory through an ifstream otherwise surfaces as libstdc++'s
// "basic_filebuf::underflow", naming no file.)
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "core/errors.hpp"

namespace loom {

// Opens `path` for reading; `what` names it in errors ("tokenizer", "text file").
inline std::ifstream open_input(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw RuntimeError("cannot read " + what + " '" + path.string() + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError("cannot open " + what + " '" + path.string() + "'" + os_reason());
  return in;
}

// The whole file.
inline std::string read_file(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in = open_input(path, what);
  std::string bytes;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) bytes.append(buf, static_cast<size_t>(in.gcount()));
  if (in.bad()) throw RuntimeError("cannot read " + what + " '" + path.string() + "'" + os_reason());
  return bytes;
}

}  // namespace loom
