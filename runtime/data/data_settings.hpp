// The [data] section: declared here and read here.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "config/schema.hpp"
#include "config/section.hpp"

namespace loom::data {

struct DataSettings {
  std::string dir, sampling, tokenizer;
  std::vector<std::string> blend;  // several directories drawn by weight; empty = dir alone
  std::vector<double> weights;
  // The directories the run reads, each with its weight: the blend's, else {dir, 1}.
  struct SourceDir {
    std::string dir,
        name;  // name: the directory's last part, "_<index>" added to a repeat (metrics)
    double weight;
  };
  std::vector<SourceDir> sources() const;
  std::string describe() const;  // "data/fortunes", or "blend of a (25%), b (75%)"
  // The run's tokenizer.json: [data] tokenizer, else the one beside its shards (a blend's first
  // directory: they share one), else none (empty).
  std::filesystem::path tokenizer_path() const;
};
// Throws ConfigError naming the file and line where the blend and its weights disagree.
DataSettings read_data(const config::Section& data);
config::SectionSpec data_section();

}  // namespace loom::data
