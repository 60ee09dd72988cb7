// What the runtime checks of a plugin descriptor before it reads anything past the base: pure
// functions of the descriptor's bytes, so the fuzzer (tests/fuzz) can drive them without a library.
#pragma once

#include <loom/plugin.h>

#include <cstddef>
#include <string>

namespace loom::plugins {

const char* kind_name(int32_t kind);  // "comm", "parallel", ...; "unknown"
const char* slot_name(int32_t slot);  // "data", "tensor", ... ("" for LOOM_SLOT_NONE)

// The size of ABI 2's table for a kind and slot (the data slot's depends on LOOM_DATA_SHARDED):
// what a descriptor's v.size must at least cover.
size_t table_size(int32_t kind, int32_t slot, uint64_t data_capabilities = 0);

// ABI 2's last minor: ABI 2 binaries load with their tables as they are (ABI 3 kept every
// plugin table's layout) and get ABI 2's op table.
constexpr uint16_t kLastV2Minor = 7;
// The size of ABI 1's and 2's loom_cost_collective, which ended before 3.0's `every`: what an
// older cost entry writes per element.
constexpr size_t kCostV2Size =
    (offsetof(loom_cost_collective, every) + alignof(loom_cost_collective) - 1) /
    alignof(loom_cost_collective) * alignof(loom_cost_collective);

// "this runtime speaks ABI 3.0 (and loads ABI 1 and 2 through adapters)": the runtime's half of a
// message that names both ABI versions.
std::string runtime_abi();

// Copies n elements an ABI 1 or 2 cost entry wrote (kCostV2Size apart) into ABI 3's: the first
// `prefix` bytes of each, the rest zero (every = 0; axis = 0 too when ABI 1.7's prefix ends
// before it), with `what` terminated.
void widen_costs(const unsigned char* raw, int64_t n, size_t prefix, loom_cost_collective* out);

// The ABI major the entry promised (`major`: 2 or 3), a known kind and a slot that fits it, a table
// at least table_size(), a name, create, destroy and every required entry, optional pairs set
// together, and an option schema of named, typed entries with unique names. Throws RuntimeError
// naming `library` and what is wrong.
void check_descriptor(const loom_plugin* d, const std::string& library, int major = LOOM_ABI_MAJOR);

namespace v1 {
struct plugin;
}
// The same of an ABI 1 descriptor, before it is adapted: a table at least ABI 1.0's size (or the
// size of the minor that introduced its slot) with that minor's required entries.
void check_v1_descriptor(const v1::plugin* d, const std::string& library);

}  // namespace loom::plugins
