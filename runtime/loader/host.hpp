// The runtime's side of the C ABI: the host table every plugin receives, error sinks and option
// tables.
#pragma once

#include <loom/plugin.h>
#include <toml++/toml.h>

#include <string>
#include <vector>

#include "loader/descriptor.hpp"

struct loom_error {
  loom_status status = LOOM_OK;
  std::string message;
};

struct loom_options {
  const toml::table* table = nullptr;  // the validated [plugins.<name>] table
};

namespace loom::plugins {

// The host table of this process for ABI 3 plugins (ABI 1 ones get v1_host()).
loom_host& host();
// The same for ABI 2 plugins: its services answer as ABI 2 did (loom.device is ABI 2's op table).
const loom_host& v2_host();
// The host of the ABI `desc` was built for (ABI 2's or ABI 3's; not for an ABI 1 original).
const loom_host& host_for(const loom_plugin* desc);

const char* status_name(loom_status s);

// What a plugin declares it handles; 0 for a plugin built before ABI 1.6, which had no
// declarations.
uint64_t data_capabilities(const loom_plugin* desc);
uint64_t ckpt_capabilities(const loom_plugin* desc);
uint64_t comm_capabilities(const loom_plugin* desc);  // LOOM_COMM_*; 0 before ABI 2.4
// A comm plugin's table with every field this runtime knows: an older plugin's later entries
// (group_start, group_end, capabilities) read as NULL and 0, so wrappers copy it whole.
loom_comm_v2 full_comm_table(const loom_comm_v2* table);
// " (it was built against ABI 1.3, before plugins declared capabilities)" or "".
std::string declared_note(const loom_plugin* desc);
// "experts, pipeline" for `loom plugins info`.
std::string capability_names(const loom_plugin* desc);
// A parallel plugin's cost entry for `loom plan`, or nullptr.
loom_cost_fn cost_entry(const loom_plugin* desc);
// Whether its table has save_state (data and precision slots).
bool keeps_state(const loom_plugin* desc);
// The optional entries a plugin provides, for `loom plugins info`: "option rules", "validate hook",
// "cost entry", "state save and load" (data and precision), "read path" (checkpoint).
std::vector<std::string> optional_entries(const loom_plugin* desc);

// "status: message" for errors that came back across the boundary.
std::string describe(const loom_error& e);

// What a failed call into a plugin table becomes: the user's mistake (LOOM_BAD_CONFIG, whose
// message names the key) a ConfigError, anything else a RuntimeError "what: message".
void check(loom_status s, const loom_error& e, const std::string& what);

}  // namespace loom::plugins
