// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "backends/common/host_buffer.hpp"
#include "switchyard/backend.hpp"

namespace switchyard::backends::reference {

/// Convolution (or its transpose) of a validated op; bias may be null.
Expected<Bytes> run_conv(const ConvOp& op, const Bytes& input, const Bytes& weight, const Bytes* bias);
/// Pooling of a validated op.
Expected<Bytes> run_pool(const PoolOp& op, const Bytes& input);

}  // namespace switchyard::backends::reference
