// SPDX-License-Identifier: Apache-2.0
// The functional NN ops: argument checks at the call, then one op each.

#include "switchyard/nn.hpp"

#include "op_emit.hpp"

namespace switchyard::nn {

using detail::TensorAccess;
using detail::TensorHandle;
using namespace detail::op_emit;  // NOLINT(google-build-using-namespace)

// --- convolution and pooling ------------------------------------------------

// --- normalisation and attention ----------------------------------------------

}  // namespace switchyard::nn
