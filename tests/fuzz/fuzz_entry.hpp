// SPDX-License-Identifier: Apache-2.0
#pragma once

// Entry points shared by the libFuzzer targets (tests/fuzz/*_fuzzer.cpp) and
// the corpus replay test in the normal suite. A finding is anything that
// crashes, trips a sanitizer, throws out of an entry or breaks one of the
// invariants the entries check (they call std::abort then).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace switchyard::fuzz {

/// Message types the decode target knows; the first input byte picks one.
enum class Target : uint8_t { operation, tensor_data, tensor_ir, device_stats, operations, data_part, count };

/// Decodes `data[1..]` as the message type named by `data[0]` with CAF's
/// binary_deserializer (types registered by register_message_types). A
/// decoded op goes through validate(); a decoded TensorData through
/// validate_data() and, if accepted, is read back element by element; what
/// decodes must serialize and decode again to the same bytes.
int decode_one(const uint8_t* data, size_t size);

/// Feeds the shape/broadcast/validation layer (op_rules) with shapes, axes,
/// strides and enums taken from `data`; checks the results' invariants.
int check_rules(const uint8_t* data, size_t size);

/// Seed inputs for decode_one: real messages serialized, tagged with their
/// Target byte. Names are stable file names for tests/fuzz/corpus/decode/.
struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
};
[[nodiscard]] std::vector<Seed> decode_seeds();
/// Seed inputs for check_rules (tests/fuzz/corpus/rules/).
[[nodiscard]] std::vector<Seed> rules_seeds();

}  // namespace switchyard::fuzz
