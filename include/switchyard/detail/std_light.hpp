// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// The parts of `<chrono>` and `<functional>` the public API uses
/// (durations, `std::function`), without the rest.
///
/// libstdc++ keeps them in `<bits/chrono.h>` and `<bits/std_function.h>`;
/// the full headers add calendars, time zones and formatting (and with them
/// `<sstream>`), and searchers (with `<unordered_map>`). Including the parts
/// takes about a fifth off what `#include <switchyard/switchyard.hpp>` costs
/// each consumer's translation unit (docs/PERFORMANCE.md). Other standard
/// libraries get the whole headers. Users who want more of `<chrono>` or
/// `<functional>` include it themselves, as always.

#include <version>

#if defined(__GLIBCXX__) && __has_include(<bits/chrono.h>) && __has_include(<bits/std_function.h>)
#include <bits/chrono.h>
#include <bits/std_function.h>
#else
#include <chrono>
#include <functional>
#endif
