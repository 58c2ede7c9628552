// SPDX-License-Identifier: Apache-2.0
#pragma once

// Kernel entry points of the CUDA backend, one per op family. This header is
// shared by the host code (g++) and the .cu files (nvcc), so it includes no
// CAF: kinds travel as their enum's integer value, dtypes as DType (a plain
// enum), and every entry returns the cudaError_t of its launch.
//
// Every entry enqueues on `stream` and returns at once; none synchronizes.
// Entries that can find bad data on the device (an index out of range, an
// integer division by zero) take a `status` word pair in device memory:
// status[0] becomes non-zero and status[1] records the offending value.
//
// Every dtype has kernels: f16 and bf16 are stored as __half and
// __nv_bfloat16 and computed in float with one rounding per element
// written (element.hpp), as the CPU backend computes them.

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

#include "backends/common/conv_shapes.hpp"
#include "switchyard/messages/dtype.hpp"
#include "switchyard/messages/op_kinds.hpp"

namespace switchyard::backends::cuda::kern {

/// Ranks above this are refused by the op rules (16 axes).
inline constexpr int max_dims = 16;

/// An iteration space of `rank` merged axes and the element strides of N
/// operands over it. A flat index i (row-major over dims) maps to one offset
/// per operand. Rank 0 is a single element at offset 0.
template <int N>
struct Layout {
  int rank = 0;
  int64_t dims[max_dims] = {};
  int64_t strides[N][max_dims] = {};
};

#if defined(__CUDACC__)
#define SY_KERNEL_HD __host__ __device__
#else
#define SY_KERNEL_HD
#endif

/// Offsets of flat index i for every operand of a layout. The outermost
/// axis needs no modulo (i is in range), so a merged contiguous layout of
/// rank 1 costs one multiply per operand. Host and device: the host tests
/// check it against the direct strided formula.
template <int N>
SY_KERNEL_HD inline void offsets(const Layout<N>& l, int64_t i, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = l.rank - 1; d > 0; --d) {
    const int64_t c = i % l.dims[d];
    i /= l.dims[d];
    for (int k = 0; k < N; ++k) off[k] += c * l.strides[k][d];
  }
  if (l.rank > 0)
    for (int k = 0; k < N; ++k) off[k] += i * l.strides[k][0];
}

/// Unary and binary kinds as integers (u_neg == UnaryKind::neg, ...), from
/// the op table, so kernels can take them as template arguments.
#define SY_KERN_UNARY(name, rule, entry) u_##name,
#define SY_KERN_BINARY(name, rule, entry) b_##name,
enum Unary : int { SWITCHYARD_UNARY_OPS(SY_KERN_UNARY) u_count };
enum Binary : int { SWITCHYARD_BINARY_OPS(SY_KERN_BINARY) b_count };
#undef SY_KERN_BINARY
#undef SY_KERN_UNARY
/// Reduce kinds, in the order of switchyard::ReduceKind.
enum Reduce : int { r_sum, r_mean, r_prod, r_max, r_min, r_argmax, r_argmin, r_var, r_std, r_any, r_all, r_count };

/// Where a launch goes and how wide the grid may be.
struct Launch {
  cudaStream_t stream = nullptr;
  int max_blocks = 1024;  // grid-stride loops cover the rest
};

// --- creation (creation.cu) ---------------------------------------------
/// Writes the `width`-byte pattern `bits` n times.
cudaError_t fill_bits(Launch l, size_t width, void* out, uint64_t bits, int64_t n);
/// out[i] = T(start + step * i).
cudaError_t arange(Launch l, DType t, void* out, int64_t n, double start, double step);
/// Ones (the `width`-byte pattern `one`) on the diagonal of `mats` rows x cols
/// matrices; the rest must already be zero.
cudaError_t eye_diagonal(Launch l, size_t width, void* out, uint64_t one, int64_t mats, int64_t rows, int64_t cols);
/// out[i] = T(random_value(draw, seed, op_index, i, a, b)) (backends/common/philox.hpp).
cudaError_t random(Launch l, DType t, void* out, int64_t n, int draw, uint64_t seed, uint64_t op_index, double a,
                   double b);

// --- elementwise (elementwise.cu) ----------------------------------------
/// Converts n contiguous elements (the CPU backend's cast rule, element.hpp).
cudaError_t cast(Launch l, const void* src, DType from, void* dst, DType to, int64_t n);
/// out[i] = op(in[i]) computed in `t`; cudaErrorNotSupported for kinds the
/// rules do not allow on `t`. `a`/`b` are clamp's bounds (NaN: absent).
cudaError_t unary(Launch l, int kind, DType t, const void* in, void* out, int64_t n, double a, double b);
/// out[i] = lhs op rhs computed in `t`, out contiguous over `layout`
/// (strides[0]: lhs, strides[1]: rhs). A null lhs or rhs stands for the
/// scalar `lhs_scalar` / `rhs_scalar` (converted to t). `status` (may be
/// null) flags an integer division by zero (remainder, floor_divide).
cudaError_t binary(Launch l, int kind, DType t, const void* lhs, const void* rhs, double lhs_scalar, double rhs_scalar,
                   void* out, const Layout<2>& layout, int64_t n, int64_t* status);
/// binary() with one tensor operand and a scalar given as the bytes of its
/// value already converted to `t` (exact for 64-bit integers); the scalar
/// is the lhs when `scalar_first`.
cudaError_t binary_scalar(Launch l, int kind, DType t, const void* tensor, const void* scalar_value, bool scalar_first,
                          void* out, const Layout<2>& layout, int64_t n, int64_t* status);
/// out[i] = cond ? lhs : rhs over `layout` (strides: cond, lhs, rhs); lhs and
/// rhs already in the output dtype of `width` bytes.
cudaError_t where(Launch l, size_t width, const uint8_t* cond, const void* lhs, const void* rhs, void* out,
                  const Layout<3>& layout, int64_t n);

// --- layout (layout.cu) ---------------------------------------------------
/// dst[dst_offset + off1(i)] = src[src_offset + off0(i)] for i < n.
cudaError_t copy_strided(Launch l, size_t width, const void* src, int64_t src_offset, void* dst, int64_t dst_offset,
                         const Layout<2>& layout, int64_t n);
/// index_select along an axis: out[o][i][r] = src[o][index[i]][r]; an
/// index out of range writes 0 (check_indices reports it).
cudaError_t index_select(Launch l, size_t width, DType index_t, const void* src, const void* index, void* out,
                         int64_t outer, int64_t axis_len, int64_t count, int64_t inner);
/// gather: for index element i (contiguous), out[i] = src[off0(i) +
/// index[i] * axis_stride] where off0 skips the axis (its stride is 0).
cudaError_t gather(Launch l, size_t width, DType index_t, const void* src, const void* index, void* out,
                   const Layout<1>& layout, int64_t axis_stride, int64_t axis_len, int64_t n, int64_t* status);
/// scatter_add: out[off0(i) + index[i] * axis_stride] += add[off1(i)],
/// atomically (float sums may differ in the last bits from the CPU's order).
cudaError_t scatter_add(Launch l, DType t, DType index_t, const void* add, const void* index, void* out,
                        const Layout<2>& layout, int64_t axis_stride, int64_t axis_len, int64_t n, int64_t* status);
/// Integer batched matrix product (wrapping arithmetic), row-major; batch
/// offsets in matrices from `batch` (strides: lhs, rhs); c is contiguous.
cudaError_t int_matmul(Launch l, DType t, const void* a, const void* b, void* c, bool ta, bool tb, int64_t m, int64_t n,
                       int64_t k, const Layout<2>& batch, int64_t batches);
/// Pointer arrays for cuBLAS's batched GEMM when batch axes broadcast
/// irregularly: ptrs[0..batches) = a + off0(i) * a_mat elements, etc.
cudaError_t batch_pointers(Launch l, size_t width, const void* a, const void* b, void* c, int64_t a_mat, int64_t b_mat,
                           int64_t c_mat, const Layout<2>& batch, int64_t batches, void** ptrs);

// --- data checks (layout.cu) -------------------------------------------------
/// A data-check record: int64[4] in device memory, {flag, value, extent,
/// meta}. A kernel that finds bad data sets flag (and value) through the
/// `status` pointer of its entry; extent and meta describe the check
/// (meta = check_op | axis << 8) so the host can word the error from the
/// record alone. Every buffer carries at most one record.
inline constexpr int check_record_words = 4;
/// check_division records the binary kind in its axis field.
enum CheckOp : int { check_gather, check_scatter_add, check_index_select, check_division };
/// Writes {0, 0, extent, meta} into a fresh record.
cudaError_t init_check(Launch l, int64_t* record, int64_t extent, int64_t meta);
/// Up to this many records fold in one launch.
inline constexpr int max_fold = 8;
struct CheckSources {
  const int64_t* records[max_fold] = {};
  int count = 0;
};
/// out = the first record of `in` (in order) whose flag is set, else zeros.
cudaError_t fold_checks(Launch l, const CheckSources& in, int64_t* out);
/// Validates `count` indices against an axis of `axis_len` (negative ones
/// count from the end) and flags the FIRST bad one in index order, as the
/// CPU reports it (a flag from inside a parallel kernel is a race winner).
cudaError_t check_indices(Launch l, DType index_t, const void* index, int64_t count, int64_t axis_len, int64_t* status);

/// For the device-lost test only: one thread writes through a bad pointer,
/// which breaks the CUDA context for the whole process (illegal address).
cudaError_t write_through_bad_pointer(Launch l);

// --- reductions (reduce.cu) -----------------------------------------------
/// Reduces `in` (dtype in_t) over the axes of `reduced` for each output of
/// `kept` (both in input element strides), writing out_t. Few outputs with
/// long reductions split each output over several blocks (two kernels)
/// when `scratch` holds reduce_scratch_bytes(); without it one block (or
/// warp) per output does all the work.
cudaError_t reduce(Launch l, int kind, DType in_t, DType out_t, const void* in, void* out, const Layout<1>& kept,
                   int64_t n_out, const Layout<1>& reduced, int64_t count, int64_t correction, void* scratch,
                   size_t scratch_bytes);
/// Bytes of device scratch a reduction of this size splits with (0: none).
inline constexpr size_t reduce_partial_bytes = 16;
size_t reduce_scratch_bytes(Launch l, const Layout<1>& kept, int64_t n_out, int64_t count);
/// (log_)softmax of rows of `len` elements `inner` apart.
cudaError_t softmax(Launch l, DType t, const void* in, void* out, int64_t outer, int64_t len, int64_t inner, bool log);

// --- convolution and pooling (conv_pool.cu) ---------------------------------
/// Convolution or its transpose (g.transposed), of a floating dtype, one
/// thread per output element summing its receptive field (f16/bf16 in f32);
/// bias may be null.
cudaError_t conv(Launch l, DType t, const ConvGeometry& g, const void* in, const void* weight, const void* bias,
                 void* out);
/// Pool kinds, in the order of switchyard::PoolKind.
enum Pool : int { p_max, p_max_indices, p_avg, p_adaptive_avg, p_adaptive_max, p_adaptive_max_indices };
/// Pooling, one thread per output element; `out` is i64 for the indices
/// kinds. `divisor_override` 0 means none.
cudaError_t pool(Launch l, DType t, int kind, const PoolGeometry& g, bool count_include_pad, int64_t divisor_override,
                 const void* in, void* out);
// --- norms, attention, scans, sorting (modules.cu) ------------------------------
/// layer/rms/group norm: `rows` contiguous slices of `size` elements; w/b
/// (nullptr when absent) indexed by position in the slice, or for groups > 0
/// by channel (row % groups) * per_group + position / spatial.
cudaError_t norm_rows(Launch l, DType t, const void* x, void* y, const void* w, const void* b, int64_t rows,
                      int64_t size, double eps, bool rms, int64_t groups, int64_t per_group, int64_t spatial);
/// Inference batch norm over channel axis 1 of [N, channels, spatial...].
cudaError_t batch_norm(Launch l, DType t, const void* x, void* y, const void* mean, const void* var, const void* w,
                       const void* b, int64_t n, int64_t channels, int64_t spatial, double eps);
/// Fused attention; mask_kind 0 none, 1 bool (keep where non-zero), 2 added
/// (dtype t). The mask element of (batch b, query i, key j) is at
/// offsets(mask_batch, b) + i * ms_l + j * ms_s. cudaErrorNotSupported when
/// the head dimensions do not fit a tile in shared memory.
cudaError_t attention(Launch l, DType t, const void* q, const void* k, const void* v, const void* mask, int mask_kind,
                      const Layout<1>& mask_batch, int64_t ms_l, int64_t ms_s, void* out, int64_t batches, int64_t L,
                      int64_t S, int64_t E, int64_t Ev, double scale, bool causal);
/// scatter / scatter_reduce kinds (the values of switchyard::IndexKind from
/// scatter on; scatter_add's sum is kept for symmetry).
enum ScatterKind : int { scatter_sum = 1, scatter_assign = 3, scatter_prod = 4, scatter_amax = 5, scatter_amin = 6 };
/// One thread per column of the index (its coordinates off the axis, laid
/// out by `columns` with strides {out (axis zeroed), src, index}), walking
/// the axis in order: out[.., index[..j..], ..] (op)= src[..j..]. Indices out
/// of range are skipped (check_indices reports the first).
cudaError_t scatter_lines(Launch l, int kind, DType t, DType index_t, const void* src, const void* index, void* out,
                          const Layout<3>& columns, int64_t ncols, int64_t m, int64_t out_axis_stride,
                          int64_t src_axis_stride, int64_t index_axis_stride, int64_t axis_len);
/// Inclusive cumsum (cumprod) of `lines` lines of `len` elements `inner`
/// apart, in and out of dtype t (floats accumulate in double).
cudaError_t scan(Launch l, DType t, const void* x, void* y, int64_t lines, int64_t len, int64_t inner, bool prod);
/// Stable sort of the n flat positions of `values` (key_t: f64 or i64) by
/// (line, value with NaN largest, position). With scratch == nullptr only
/// sets *scratch_bytes; then call again with that much scratch.
cudaError_t sort_positions(Launch l, DType key_t, const void* values, int64_t n, int64_t len, int64_t inner,
                           bool descending, void* scratch, size_t* scratch_bytes);
/// out[o][r][c] = the line position of rank r (r < keep) of line (o, c),
/// from the sorted positions sort_positions left at the start of scratch.
cudaError_t sort_ranks(Launch l, const void* scratch, int64_t* out, int64_t lines, int64_t len, int64_t inner,
                       int64_t keep);

}  // namespace switchyard::backends::cuda::kern
