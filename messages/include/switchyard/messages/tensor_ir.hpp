// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "switchyard/messages/dtype.hpp"
#include "switchyard/messages/shape.hpp"
#include "switchyard/messages/tensor_id.hpp"

namespace switchyard {

/// How an op uses a tensor it names.
enum class TensorStatus : uint8_t {
  /// An output the op creates.
  not_init,
  /// An input that stays alive after the op.
  read_only,
  /// An input used for the last time: the backend may reuse its buffer for
  /// an output, and the runner drops the handle after the op.
  read_write,
};

/// A tensor as an op names it.
struct TensorIr {
  TensorId id;
  Shape shape;
  DType dtype = DType::f32;
  TensorStatus status = TensorStatus::not_init;

  [[nodiscard]] int64_t numel() const noexcept { return shape.numel(); }
  [[nodiscard]] size_t bytes() const noexcept { return static_cast<size_t>(shape.numel()) * size_of(dtype); }
};

// Its inspect overload is in inspect.hpp (a compact encoding that needs
// CAF's serializer types; this header stays free of CAF).

}  // namespace switchyard
