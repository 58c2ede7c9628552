// SPDX-License-Identifier: Apache-2.0
#pragma once

// Device-side helpers shared by the .cu files: flat index -> operand
// offsets, grid sizing, and the status word that reports bad data.

#include <cstdint>
#include <type_traits>

#include "backends/cuda/element.hpp"
#include "backends/cuda/kernels.hpp"

namespace switchyard::backends::cuda::kern {

inline constexpr int block_threads = 256;

/// The quiet NaN of std::numeric_limits (its constexpr members are host-only).
template <class T>
__device__ inline T quiet_nan() {
  if constexpr (std::is_same_v<T, float>)
    return __int_as_float(0x7fc00000);
  else
    return __longlong_as_double(0x7ff8000000000000LL);
}
template <class T>
__device__ inline T infinity() {
  if constexpr (std::is_same_v<T, float>)
    return __int_as_float(0x7f800000);
  else
    return __longlong_as_double(0x7ff0000000000000LL);
}

/// Blocks for n elements: enough to fill the device, the rest by striding.
inline unsigned grid_for(const Launch& l, int64_t n) {
  int64_t blocks = (n + block_threads - 1) / block_threads;
  if (blocks > l.max_blocks) blocks = l.max_blocks;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

#define SY_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

/// Records the first offending value: status[0] = 1, status[1] = value.
__device__ inline void flag(int64_t* status, int64_t value) {
  auto* word = reinterpret_cast<unsigned long long*>(status);
  if (atomicCAS(word, 0ULL, 1ULL) == 0ULL) status[1] = value;
}

/// Launches kernel<<<grid, block, 0, stream>>> for n > 0 and returns the
/// launch error (a zero-sized grid is itself an error, so empty work is
/// skipped here once for every entry).
template <class Kernel, class... Args>
cudaError_t launch(const Launch& l, int64_t n, Kernel kernel, Args... args) {
  if (n <= 0) return cudaSuccess;
  kernel<<<grid_for(l, n), block_threads, 0, l.stream>>>(args...);
  return cudaGetLastError();
}

/// Unsigned type of T's width: integer arithmetic wraps instead of being
/// undefined on overflow (the CPU backend does the same).
template <class T>
struct WideOf {
  using type = T;
};
template <>
struct WideOf<int32_t> {
  using type = uint32_t;
};
template <>
struct WideOf<int64_t> {
  using type = uint64_t;
};
template <class T>
using Wide = typename WideOf<T>::type;

/// Element type of a width in bytes: layout kernels move bits, not values.
template <size_t W>
struct Bits;
template <>
struct Bits<1> {
  using type = uint8_t;
};
template <>
struct Bits<2> {
  using type = uint16_t;
};
template <>
struct Bits<4> {
  using type = uint32_t;
};
template <>
struct Bits<8> {
  using type = uint64_t;
};

/// visit_dtype for kernel dispatch: `f(T{})` with the storage type of `t`
/// (__half and __nv_bfloat16 for the 16-bit floats, which kernels compute
/// in Opmath<T>). An invalid dtype (a lying peer) is a CUDA-style error
/// instead of a kernel of another width.
template <class F>
cudaError_t by_dtype(DType t, F&& f) {
  if (t == DType::f16) return f(__half{});
  if (t == DType::bf16) return f(__nv_bfloat16{});
  return visit_arithmetic_dtype(t, f, [](DType) { return cudaErrorInvalidValue; });
}

/// by_dtype over the floating dtypes only (the nn kernels); the rest are
/// refused with cudaErrorNotSupported before anything is instantiated.
template <class F>
cudaError_t by_float_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::f16:
      return f(__half{});
    case DType::bf16:
      return f(__nv_bfloat16{});
    default:
      return cudaErrorNotSupported;
  }
}

template <class F>
cudaError_t by_width(size_t width, F&& f) {
  switch (width) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace switchyard::backends::cuda::kern
