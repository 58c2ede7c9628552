// SPDX-License-Identifier: Apache-2.0
// Creation kernels: fill, arange, eye and the counter-based random draws.
// This file is compiled with -fmad=false: arange's start + step * i and the
// random transforms must round exactly like the CPU backend (no fused
// multiply-add), so both backends give the same bits.

#include "backends/common/number_conversion.hpp"
#include "backends/common/philox.hpp"
#include "backends/cuda/device_util.cuh"

namespace switchyard::backends::cuda::kern {
namespace {

template <class W>
__global__ void fill_kernel(W* out, W value, int64_t n) {
  SY_GRID_STRIDE(i, n) out[i] = value;
}

template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  // The shared rule, as on the CPU: arange(-3, 3, 1, u8) wraps to 253, 254, 255, 0, 1, 2.
  SY_GRID_STRIDE(i, n) out[i] = kern::from_double<T>(start + step * static_cast<double>(i));
}

template <class W>
__global__ void eye_kernel(W* out, W one, int64_t diag, int64_t rows, int64_t cols, int64_t total) {
  SY_GRID_STRIDE(i, total) {
    const int64_t m = i / diag, d = i % diag;
    out[m * rows * cols + d * cols + d] = one;
  }
}

template <class T>
__global__ void random_kernel(T* out, int64_t n, RandomDraw draw, uint64_t seed, uint64_t op_index, double a,
                              double b) {
  // The cast rule (f16/bf16 through float, as the CPU's Half(double)).
  SY_GRID_STRIDE(i, n) out[i] = convert<double, T>(random_value(draw, seed, op_index, static_cast<uint64_t>(i), a, b));
}

}  // namespace

cudaError_t fill_bits(Launch l, size_t width, void* out, uint64_t bits, int64_t n) {
  return by_width(width, [&](auto tag) {
    using W = decltype(tag);
    return launch(l, n, fill_kernel<W>, static_cast<W*>(out), static_cast<W>(bits), n);
  });
}

cudaError_t arange(Launch l, DType t, void* out, int64_t n, double start, double step) {
  return by_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    return launch(l, n, arange_kernel<T>, static_cast<T*>(out), n, start, step);
  });
}

cudaError_t eye_diagonal(Launch l, size_t width, void* out, uint64_t one, int64_t mats, int64_t rows, int64_t cols) {
  const int64_t diag = rows < cols ? rows : cols;
  const int64_t total = mats * diag;
  if (diag == 0) return cudaSuccess;
  return by_width(width, [&](auto tag) {
    using W = decltype(tag);
    return launch(l, total, eye_kernel<W>, static_cast<W*>(out), static_cast<W>(one), diag, rows, cols, total);
  });
}

cudaError_t random(Launch l, DType t, void* out, int64_t n, int draw, uint64_t seed, uint64_t op_index, double a,
                   double b) {
  return by_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    return launch(l, n, random_kernel<T>, static_cast<T*>(out), n, static_cast<RandomDraw>(draw), seed, op_index, a, b);
  });
}

}  // namespace switchyard::backends::cuda::kern
