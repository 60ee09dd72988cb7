// Plugins built against ABI 1 (1.0 to 1.8) run through adapters: at load, each of their
// descriptors becomes an ABI 2 table whose entries forward to the old one, so the rest of the
// runtime sees ABI 2 alone. An adapted instance's self is a wrapper holding the old table and
// the plugin's own self; contexts that hold a comm table get it in ABI 1's layout.
//
// A descriptor's life (score, create, destroy, the validate hook) goes through the functions
// below for both majors, because an adapted descriptor needs the old host table for those calls.
#pragma once

#include <loom/plugin.h>

#include <string>

#include "loader/abi_v1.hpp"
#include "loader/descriptor.hpp"

namespace loom::plugins {

// The ABI 2 view of an ABI 1 descriptor, made once per descriptor and kept for the process.
// Throws RuntimeError naming `library` when the old table is unusable (an entry every plugin of
// its kind must have is NULL, or the table is shorter than ABI 1.0's).
const loom_plugin* adapt_v1(const v1::plugin* desc, const std::string& library);
// The ABI 1 descriptor behind an adapted one; nullptr for a plugin built against ABI 2.
const v1::plugin* v1_original(const loom_plugin* desc);

// score() > 0, or 0 with *why_not; a NULL score is 1.
int32_t score_plugin(const loom_plugin* desc, const char** why_not);
loom_status create_plugin_instance(const loom_plugin* desc, const loom_options* opts, void** self,
                                   loom_error* err);
void destroy_plugin_instance(const loom_plugin* desc, void* self);
// The plugin's validate hook; LOOM_OK when it has none.
loom_status validate_plugin_options(const loom_plugin* desc, const loom_options* opts,
                                    loom_error* err);

// The host table ABI 1 plugins receive, sharing the ABI 2 host's functions.
const v1::host& v1_host();
// loom.plugins for ABI 1 callers: they may wrap comm plugins (of either major), handed out in
// ABI 1's layout.
const v1::plugins_service& v1_plugins_service();

}  // namespace loom::plugins
