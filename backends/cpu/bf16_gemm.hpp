// SPDX-License-Identifier: Apache-2.0
#pragma once

// bf16 matmul on the AVX-512 BF16 dot product (VDPBF16PS): bf16 operands,
// f32 accumulation, one rounding to bf16, with no f32 copies of the
// operands. Picked at run time; on other CPUs (and for operands it cannot
// take) bf16 matmul widens to f32 and runs cblas_sgemm like every other
// 16-bit op (widen.cpp).

#include <cstdint>
#include <optional>

#include "backends/cpu/kernels.hpp"

namespace switchyard::backends::cpu {

/// Whether this build and this CPU can run the native kernel (x86-64, a
/// compiler with the AVX512-BF16 intrinsics, a CPU with avx512bf16 whose OS
/// saves the AVX-512 state).
[[nodiscard]] bool cpu_has_bf16_dot() noexcept;

/// Whether bf16 matmuls go to the native kernel: cpu_has_bf16_dot() and not
/// switched off, by SWITCHYARD_CPU_BF16_GEMM=0 in the environment (read
/// once, at the first bf16 matmul) or by set_native_bf16_gemm(false).
[[nodiscard]] bool native_bf16_gemm_enabled() noexcept;

/// Switches the native kernel on or off for the whole process and returns
/// the previous setting; on a CPU without it, it stays off. Internal: the
/// tests run both paths on the same inputs, the benchmarks time both.
bool set_native_bf16_gemm(bool on) noexcept;

/// How many matmuls the native kernel has computed in this process (the
/// tests check that the path they mean to test ran).
[[nodiscard]] uint64_t native_bf16_gemm_runs() noexcept;

/// A bf16 MatmulOp (matmul or linear: any batch broadcast, either operand
/// transposed, an optional bias) on the native kernel. Nothing when the
/// kernel is off, the op is not bf16, a dimension is 0, or an operand holds
/// a subnormal, which VDPBF16PS would read as zero: the caller then runs
/// the f32 path, which keeps it.
[[nodiscard]] std::optional<Expected<Bytes>> matmul_bf16(Context& ctx, const MatmulOp& op, const Inputs& in);

}  // namespace switchyard::backends::cpu
