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
  /// Element-wise ops, reductions, scans, sorting and the nn ops run.
  bool arithmetic = false;
  /// matmul and the convolution / attention ops run.
  bool matmul = false;
  /// How, in words: the type arithmetic happens in and where it rounds.
  std::string how;
};

/// The table for a backend kind ("cpu", "reference", "cuda"); an unknown
/// kind supports nothing. Every backend supports f32, f64, the integers and
/// bool fully; the 16-bit types differ.
[[nodiscard]] DTypeSupport dtype_support(std::string_view backend_kind, DType t);

}  // namespace switchyard
