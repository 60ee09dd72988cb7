// The [data] section: declared here and read here.
#pragma once

#include <string>

#include "config/config.hpp"
#include "config/schema.hpp"

namespace loom::data {

struct DataSettings {
  std::string dir, sampling, tokenizer;
};
DataSettings read_data(const config::Config& cfg);
config::SectionSpec data_section();

}  // namespace loom::data
