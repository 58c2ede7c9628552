// SPDX-License-Identifier: Apache-2.0
#pragma once

/// Functional neural-network ops (PyTorch 1.13's torch.nn.functional names,
/// argument names and semantics). Each is one op on the tensor's device;
/// bad arguments fail at the call with an Error naming the op, the shapes
/// and the argument.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "switchyard/tensor.hpp"

namespace switchyard::nn {

// --- convolution and pooling ------------------------------------------------

// --- normalisation and attention ----------------------------------------------

}  // namespace switchyard::nn
