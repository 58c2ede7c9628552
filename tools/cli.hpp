// SPDX-License-Identifier: Apache-2.0
#pragma once

// The command-line conventions of every program Switchyard ships
// (switchyard-worker, the examples), on CLI11 (Debian's libcli11-dev):
//   - `--opt value` and `--opt=value`; the last of a repeated option counts,
//     so scripts can append overrides;
//   - --help and --version print to stdout and exit 0; a usage error prints
//     "<program>: <what, naming the option> (see --help)" to stderr and
//     exits 2;
//   - no configuration file is read.
// CMake target switchyard_cli (SWITCHYARD_VERSION is the project's version).

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace switchyard::cli {

/// The program's CLI11 app, with the conventions above.
inline void apply_conventions(CLI::App& app) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", app.get_name() + " " SWITCHYARD_VERSION);
}

/// Checks that an option's value is a decimal integer in [lo, hi]. CLI11
/// 2.1 alone reads "-1" for an unsigned option as 2^64 - 1, "010" as octal
/// 8 and an overflow as the type's maximum, all without an error.
template <std::integral T>
CLI::Validator integer_in(T lo, T hi) {
  // A 64-bit maximum is no bound of the program's, only the type's: such an
  // option is described by its lower bound. A narrower type's maximum (a
  // port's 65535) is a real bound and shown.
  const bool open_ended = hi == std::numeric_limits<T>::max() && sizeof(T) >= 8;
  const std::string range =
      open_ended ? "at least " + std::to_string(lo) : "in " + std::to_string(lo) + ".." + std::to_string(hi);
  const std::string too_large = "too large (at most " + std::to_string(hi) + ")";
  return CLI::Validator(
      [lo, hi, range, too_large](std::string& text) -> std::string {
        std::string_view digits = text;
        if (digits.starts_with('-')) digits.remove_prefix(1);
        const bool decimal = !digits.empty() && (digits.size() == 1 || digits.front() != '0') &&
                             std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!decimal) return "'" + text + "' is not a decimal integer";
        // A negative value for an unsigned T fails here too, as out of range.
        T value{};
        auto [stop, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec == std::errc::result_out_of_range && !text.starts_with('-')) return "'" + text + "' is " + too_large;
        if (ec != std::errc() || value < lo || value > hi) return "'" + text + "' is not " + range;
        return {};
      },
      (open_ended && lo == T{0}) ? std::string() : range);
}

/// Prints a usage error ("<program>: <what> (see --help)"); returns 2, the
/// exit code for it.
inline int usage_error(const CLI::App& app, const std::string& what) {
  std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), what.c_str());
  return 2;
}

/// Parses the command line: nullopt when the program should go on, else its
/// exit code (0 after --help or --version, 2 after a usage error). Options
/// a program requires are best checked after this, with usage_error: CLI11
/// reports a missing required option before an unknown one, so a mistyped
/// `--modle x` would read "--model is required".
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e.what());
  }
  return std::nullopt;
}

}  // namespace switchyard::cli
