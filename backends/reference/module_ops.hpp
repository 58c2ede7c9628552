// SPDX-License-Identifier: Apache-2.0
#pragma once

// The reference backend's normalisation, attention, scan and sort ops
// (module_ops.cpp): plain loops in double, the oracle for the other backends.

#include <vector>

#include "switchyard/backend.hpp"
#include "switchyard/messages/ops.hpp"

namespace switchyard::backends::reference {

using InputBytes = std::vector<const Bytes*>;

Expected<Bytes> run_norm(const NormOp& op, const InputBytes& in);
Expected<Bytes> run_attention(const AttentionOp& op, const InputBytes& in);
Expected<Bytes> run_scan(const ScanOp& op, const InputBytes& in);
Expected<Bytes> run_sort(const SortOp& op, const InputBytes& in);

}  // namespace switchyard::backends::reference
