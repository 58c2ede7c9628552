// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <string_view>

#include "switchyard/messages/dtype.hpp"

namespace switchyard {

/// What a backend does with one dtype (Device::dtype_support).
struct DTypeSupport {
  /// Tensors of the dtype can live on the device: created, read, written,
  /// cast, moved by layout ops and bridged.
  bool storage = false;
  /// The device computes in the dtype: element-wise ops, reductions, scans
  /// and sorting run, as each op's dtype rule allows (the nn ops, such as
  /// convolution, softmax and attention, take floating dtypes only).
  bool arithmetic = false;
  /// matmul and linear run (bool has no matmul on any device).
  bool matmul = false;
  /// How, in words: the type arithmetic happens in and where it rounds.
  std::string how;
};

/// The table for a backend kind ("cpu", "reference", "cuda"); an unknown
/// kind supports nothing. Every backend supports f32, f64, the integers and
/// bool fully; the 16-bit types differ.
[[nodiscard]] DTypeSupport dtype_support(std::string_view backend_kind, DType t);

}  // namespace switchyard
