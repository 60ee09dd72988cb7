// What the uniform and the mixed cluster file readers share: the file read as a path the user
// typed (a missing one is a ConfigError, exit 2) and parsed with file:line:column in its errors.
#pragma once

#include <toml++/toml.h>

#include <filesystem>
#include <string>

namespace loom::plan {

std::string read_cluster_file(const std::filesystem::path& file);
toml::table parse_cluster_toml(const std::string& text, const std::string& source);
// Whether a line of the file starts with `header` ("[cluster]", "[[group]]"): a quick look, before
// the file is read as one kind or the other.
bool has_table_line(const std::filesystem::path& file, const std::string& header);

}  // namespace loom::plan
