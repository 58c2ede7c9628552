// SPDX-License-Identifier: Apache-2.0
#pragma once

// Convolution and pooling ops as kernels see them: 1-D and 2-D ops are 3-D
// ops whose leading spatial axes have extent 1 (kernel 1, stride 1, no
// padding), so every backend writes one kernel per op for three spatial
// axes. Plain structs (no CAF), shared with the CUDA kernels.

#include <cstdint>

#if defined(__CUDACC__)
#define SY_GEOMETRY_HD __host__ __device__
#else
#define SY_GEOMETRY_HD
#endif

namespace switchyard::backends {

struct ConvGeometry {
  int64_t batch = 1;
  int64_t groups = 1;
  int64_t c_in = 0;   ///< input channels (all groups)
  int64_t c_out = 0;  ///< output channels (all groups)
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0},
          dilation[3] = {1, 1, 1};
  bool transposed = false;

  [[nodiscard]] SY_GEOMETRY_HD int64_t in_plane() const noexcept { return in[0] * in[1] * in[2]; }
  [[nodiscard]] SY_GEOMETRY_HD int64_t out_plane() const noexcept { return out[0] * out[1] * out[2]; }
  [[nodiscard]] SY_GEOMETRY_HD int64_t kernel_size() const noexcept { return kernel[0] * kernel[1] * kernel[2]; }
  [[nodiscard]] SY_GEOMETRY_HD int64_t c_in_group() const noexcept { return c_in / groups; }
  [[nodiscard]] SY_GEOMETRY_HD int64_t c_out_group() const noexcept { return c_out / groups; }
};

struct PoolGeometry {
  int64_t planes = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0},
          pad_after[3] = {0, 0, 0}, dilation[3] = {1, 1, 1};

  [[nodiscard]] SY_GEOMETRY_HD int64_t in_plane() const noexcept { return in[0] * in[1] * in[2]; }
  [[nodiscard]] SY_GEOMETRY_HD int64_t out_plane() const noexcept { return out[0] * out[1] * out[2]; }
};

/// Adaptive pooling's window on one axis: [start, end) for output index o.
SY_GEOMETRY_HD inline int64_t adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
SY_GEOMETRY_HD inline int64_t adaptive_end(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

}  // namespace switchyard::backends
