// SPDX-License-Identifier: Apache-2.0
#pragma once

// f32 GEMM on AVX-512F FMA, for the convolutions (and, where it measured
// faster, the matmuls) of the CPU backend. OpenBLAS runs whichever kernels
// the deployer's environment picks (OPENBLAS_CORETYPE=Haswell means AVX2,
// about half of what an AVX-512 core does); this kernel runs at the CPU's
// own width wherever it has AVX-512F, and the callers fall back to
// cblas_sgemm elsewhere. B can be produced block by block by the caller, so
// a convolution packs its column matrix straight from the image (implicit
// im2col) instead of writing it out first.

#include <cstdint>
#include <functional>

#include "backends/cpu/thread_pool.hpp"

namespace switchyard::backends::cpu {

/// Whether this build and this CPU can run the kernel (x86-64, AVX-512F
/// with the OS saving the zmm state).
[[nodiscard]] bool cpu_has_avx512f() noexcept;

/// Whether f32 GEMMs go to the native kernel: cpu_has_avx512f() and not
/// switched off, by SWITCHYARD_CPU_F32_GEMM=0 in the environment (read once,
/// at the first use) or by set_native_f32_gemm(false).
[[nodiscard]] bool native_f32_gemm_enabled() noexcept;

/// Switches the native kernel on or off for the whole process and returns
/// the previous setting; on a CPU without it, it stays off. Internal: the
/// tests run both paths on the same inputs, the benchmarks time both.
bool set_native_f32_gemm(bool on) noexcept;

/// How many GEMM calls (each possibly a batch) the native kernel has run in
/// this process (the tests check that the path they mean to test ran).
[[nodiscard]] uint64_t native_f32_gemm_runs() noexcept;

/// Whether OpenBLAS runs AVX-512 kernels in this process (its core is
/// SkylakeX, CooperLake or SapphireRapids: OPENBLAS_CORETYPE, or what it
/// detected). f32 matmuls stay on OpenBLAS then (see matmul.cpp).
[[nodiscard]] bool openblas_runs_avx512() noexcept;

/// One batch entry's operands.
struct F32GemmOperands {
  const float* a = nullptr;
  const float* b = nullptr;  // unused when the B is filled by `fill_b`
  float* c = nullptr;
  const float* row_bias = nullptr;  // m values C starts from, or null
  /// Added to each finished sum as it is stored (element (i, j) at
  /// add[i * ldc + j]), or null: a residual connection fused into a
  /// convolution. Must not overlap C, which holds partial sums meanwhile.
  const float* add = nullptr;
  /// n values added to each row's finished sums before `add` (a linear
  /// layer's bias, where the unfused op adds it), or null.
  const float* col_bias = nullptr;
};

/// What happens to each element of C after its last product, before it is
/// stored: the element-wise ops that follow a convolution in a CNN, applied
/// while the sums are still in registers instead of in passes over memory.
/// In this order: C + col_bias (F32GemmOperands), C + add (or add + C when
/// add_first, the operands as the unfused add took them), then relu (NaN stays NaN, -0 becomes 0, as the
/// unfused relu); every step one f32 rounding, so the bits are those of the
/// unfused ops.
struct F32GemmEpilogue {
  bool add_first = false;
  bool relu = false;
};

/// C (m x n, rows ldc apart) = [C +] [row_bias +] A (m x k) B (k x n), for
/// each of `batches` entries, whose operands `locate` returns.
struct F32Gemm {
  int64_t m = 0, n = 0, k = 0, batches = 1;
  /// A's element (i, p) is a[i * lda + p], or a[p * lda + i] when transposed.
  int64_t lda = 0;
  bool a_transposed = false;
  /// B's element (p, j) is b[p * ldb + j], or b[j * ldb + p] when
  /// transposed; unless fill_b is set: it writes rows [p0, p1) x columns
  /// [j0, j1) of entry `batch`'s B, row-major, to dst (rows ld_dst apart).
  int64_t ldb = 0;
  bool b_transposed = false;
  std::function<void(int64_t batch, int64_t p0, int64_t p1, int64_t j0, int64_t j1, float* dst, int64_t ld_dst)> fill_b;
  /// Or B as shifted rows of the entry's b (a convolution's column matrix
  /// when every stride is 1 and the output has the input's extent): B(p, j)
  /// = b[row_offset[p] + j] where bit j % 16 of
  /// row_mask[row_class[p] * mask_words + j / 16] is set, else 0. Packed
  /// with masked vector loads, so it costs little more than a copy.
  const int64_t* row_offset = nullptr;
  const int32_t* row_class = nullptr;
  const uint16_t* row_mask = nullptr;
  int64_t mask_words = 0;
  int64_t ldc = 0;
  /// Or B (of a single product: batches 1) as pack_b wrote it, kept
  /// between calls: a model's weight is not packed again on every call.
  const float* packed_b = nullptr;
  /// C += A B (C's values are kept), else C = A B (C is only written).
  bool accumulate = false;
  F32GemmEpilogue epilogue;
  std::function<F32GemmOperands(int64_t batch)> locate;
};

/// A's or B's memory in a single product: element (r, c) of the
/// untransposed operand at data[r * ld + c], or data[c * ld + r] when
/// `transposed`.
struct F32Operand {
  const float* data = nullptr;
  int64_t ld = 0;
  bool transposed = false;
};

/// One product C (m x n, rows ldc apart) = A (m x k) B (k x n) at fixed
/// addresses: no batches, biases or epilogue (set `accumulate` or
/// `epilogue` on the result for more). What a kernel's own sub-products
/// (attention's blocks, a transposed convolution's columns) ask of it.
[[nodiscard]] inline F32Gemm single_product(int64_t m, int64_t n, int64_t k, F32Operand a, F32Operand b, float* c,
                                            int64_t ldc) {
  F32Gemm g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = a.ld;
  g.a_transposed = a.transposed;
  g.ldb = b.ld;
  g.b_transposed = b.transposed;
  g.ldc = ldc;
  g.locate = [a = a.data, b = b.data, c](int64_t) { return F32GemmOperands{a, b, c}; };
  return g;
}

/// The epilogue as a pass over the `n` finished values of `y` (`add` as
/// long, or null), for when the kernel that would have applied it was off:
/// the same bits as in the GEMM's store.
void apply_epilogue(ThreadPool& pool, float* y, const float* add, F32GemmEpilogue ep, int64_t n);

/// Runs `g` on the native kernel over the pool's threads; false (nothing
/// done) when the kernel is off. Every dimension may be 0. IEEE throughout:
/// no product is skipped for a zero operand, so 0 * Inf gives NaN.
[[nodiscard]] bool gemm_f32(ThreadPool& pool, const F32Gemm& g);

/// gemm_f32 on the calling thread alone, for a kernel whose own tasks
/// already run on the device's threads (the pool does not nest).
[[nodiscard]] bool gemm_f32_here(const F32Gemm& g);

/// Floats of B packed whole in the kernel's layout (F32Gemm::packed_b), or
/// 0 where the kernel would not read such a packing (a one-row product, a B
/// given other than as memory, several products).
[[nodiscard]] size_t packed_b_floats(const F32Gemm& g);
/// Packs entry 0's B whole into `out` (packed_b_floats(g) floats): each
/// block of K rows as the kernel packs it for one call, panel by panel.
void pack_b(const F32Gemm& g, float* out);

}  // namespace switchyard::backends::cpu
