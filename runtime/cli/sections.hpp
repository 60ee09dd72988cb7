// Every section a Loom config file may hold, in the order `loom config show` prints them. Each
// component declares its own section beside its code; this list, at the top of the program, is
// the one place that gathers them, so nothing below the command line includes every component.
#pragma once

#include <vector>

#include "config/schema.hpp"

namespace loom::cli {

const std::vector<config::SectionSpec>& runtime_schema();

}  // namespace loom::cli
