// SPDX-License-Identifier: Apache-2.0
#pragma once

// sy::Error, what the client API throws, lives with the error codes in
// messages/error.hpp (so the message types' own helpers throw it as well).
#include "switchyard/messages/error.hpp"
