// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// The one header a user includes: every other public header.

#include "switchyard/device.hpp"
#include "switchyard/error.hpp"
#include "switchyard/future.hpp"
#include "switchyard/log.hpp"
#include "switchyard/nn.hpp"
#include "switchyard/recording.hpp"
#include "switchyard/runtime.hpp"
#include "switchyard/tensor.hpp"
