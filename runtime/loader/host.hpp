// The runtime's side of the C ABI: the host table every plugin receives, error sinks and option
// tables.
#pragma once

#include <string>

#include <loom/plugin.h>
#include <toml++/toml.h>

struct loom_error {
  loom_status status = LOOM_OK;
  std::string message;
};

struct loom_options {
  const toml::table* table = nullptr;  // the validated [plugins.<name>] table
};

namespace loom::plugins {

// The one host table of this process. Services (ops, mesh, ...) are filled in as they start.
loom_host& host();

const char* kind_name(int32_t kind);  // "comm", "parallel", ...
const char* slot_name(int32_t slot);  // "data", "tensor", ... ("" for LOOM_SLOT_NONE)
const char* status_name(loom_status s);

// "status: message" for errors that came back across the boundary.
std::string describe(const loom_error& e);

// What a failed call into a plugin table becomes: the user's mistake (LOOM_BAD_CONFIG, whose
// message names the key) a ConfigError, anything else a RuntimeError "what: message".
void check(loom_status s, const loom_error& e, const std::string& what);

}  // namespace loom::plugins
