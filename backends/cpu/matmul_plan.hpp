// SPDX-License-Identifier: Apache-2.0
#pragma once

// The batch layout of a MatmulOp, shared by the OpenBLAS path (matmul.cpp)
// and the native bf16 kernel (bf16_gemm.cpp) so that both walk broadcast
// batch axes the same way.

#include <cstdint>
#include <utility>
#include <vector>

#include "switchyard/messages/ops.hpp"

namespace switchyard::backends::cpu {

struct MatmulDims {
  int64_t m = 0, k = 0, n = 0;
  int64_t batches = 0;
  std::vector<int64_t> batch_dims, a_batch_strides, b_batch_strides;  // in matrices

  /// The lhs and rhs matrices (indices into each operand's stack of
  /// matrices) that result matrix `batch` multiplies: a broadcast batch axis
  /// repeats one operand matrix.
  [[nodiscard]] std::pair<int64_t, int64_t> operands(int64_t batch) const {
    int64_t rem = batch, ao = 0, bo = 0;
    for (size_t i = batch_dims.size(); i-- > 0;) {
      const int64_t idx = rem % batch_dims[i];
      rem /= batch_dims[i];
      ao += idx * a_batch_strides[i];
      bo += idx * b_batch_strides[i];
    }
    return {ao, bo};
  }
};

[[nodiscard]] MatmulDims plan_matmul(const MatmulOp& op);

}  // namespace switchyard::backends::cpu
