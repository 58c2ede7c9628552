// SPDX-License-Identifier: Apache-2.0
#pragma once

// The one way CUDA and cuBLAS calls are checked in this backend: a failing
// call returns a Switchyard error naming the call, the CUDA error and the
// file:line where it happened. Nothing aborts; the error becomes the op's
// error on its outputs (or the read's error).

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "switchyard/backend.hpp"

namespace switchyard::backends::cuda {

/// Error for a failed CUDA runtime call (clears CUDA's last-error slot, so
/// a later launch check does not report it again). Allocation failures map
/// to out_of_memory, cudaErrorNotSupported to unsupported, the rest to
/// kernel_failure.
[[nodiscard]] DeviceError cuda_failure(cudaError_t e, const char* expr, const char* file, int line);
/// Error for a failed cuBLAS call.
[[nodiscard]] DeviceError cublas_failure(cublasStatus_t s, const char* expr, const char* file, int line);

}  // namespace switchyard::backends::cuda

/// Evaluates a cudaError_t expression; on failure returns the error from
/// the enclosing function (which returns DeviceError or Expected<T>).
#define SY_CUDA_TRY(expr)                                                                            \
  do {                                                                                               \
    if (const cudaError_t sy_cuda_status_ = (expr); sy_cuda_status_ != cudaSuccess)                  \
      return ::switchyard::backends::cuda::cuda_failure(sy_cuda_status_, #expr, __FILE__, __LINE__); \
  } while (0)

/// Same for a cublasStatus_t expression.
#define SY_CUBLAS_TRY(expr)                                                                            \
  do {                                                                                                 \
    if (const cublasStatus_t sy_blas_status_ = (expr); sy_blas_status_ != CUBLAS_STATUS_SUCCESS)       \
      return ::switchyard::backends::cuda::cublas_failure(sy_blas_status_, #expr, __FILE__, __LINE__); \
  } while (0)
