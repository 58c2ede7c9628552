// SPDX-License-Identifier: Apache-2.0
// The "direct" side of the GPU benchmarks that needs device code: an empty
// kernel, to price a bare launch.

#include <cuda_runtime_api.h>

namespace {
__global__ void empty_kernel() {}
}  // namespace

/// Launches `n` empty kernels on `stream`; returns the first error.
cudaError_t launch_empty(cudaStream_t stream, int n) {
  for (int i = 0; i < n; ++i) empty_kernel<<<1, 32, 0, stream>>>();
  return cudaGetLastError();
}
