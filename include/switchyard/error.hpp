#pragma once

#include <stdexcept>
#include <string>

#include "switchyard/messages/error.hpp"

namespace switchyard {

/// What the client API throws: at the call for bad input (shapes, dtypes,
/// devices), and from Future::get() for failures on a device.
class Error : public std::runtime_error {
 public:
  /// An error of kind `code`; `what` names the op and what was wrong.
  Error(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  /// The kind of failure.
  [[nodiscard]] Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

}  // namespace switchyard
