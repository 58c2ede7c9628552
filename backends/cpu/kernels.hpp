// SPDX-License-Identifier: Apache-2.0
#pragma once

// Kernels of the CPU backend, one function per op family. Each takes the
// op, its input bytes (in each_input order) and returns the output bytes.

#include <optional>
#include <vector>

#include "backends/common/host_buffer.hpp"
#include "backends/cpu/buffer_pool.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace switchyard::backends::cpu {

class PackedWeights;

/// What a kernel needs from its device.
struct Context {
  ThreadPool& pool;
  BufferPool& buffers;
  uint64_t seed = 0;
  uint64_t random_ops = 0;  // random ops run since the seed
  /// Weights kept packed between calls (null: packed on every call).
  PackedWeights* packed = nullptr;
};

/// Inputs as bytes, each_input order; `consumable[i]` when input i may be
/// overwritten in place.
struct Inputs {
  std::span<const Bytes* const> bytes;
  std::span<const bool> consumable;
};

/// Input i's block, for a packing the kernel keeps between calls
/// (Context::packed), unless the op may overwrite it: a last use (no later
/// call has it) or a widened copy made for this call alone.
[[nodiscard]] inline const Bytes* kept_block(const Inputs& in, size_t i) {
  return in.consumable[i] ? nullptr : in.bytes[i];
}

// Elements per chunk below which threads cost more than they save.
inline constexpr int64_t parallel_grain = 32768;

Expected<Bytes> fill(Context&, FillOp&);
Expected<Bytes> random(Context&, RandomOp&);
Expected<Bytes> unary(Context&, UnaryOp&, const Inputs&);
Expected<Bytes> binary(Context&, BinaryOp&, const Inputs&);
Expected<Bytes> scalar(Context&, ScalarOp&, const Inputs&);
/// A tiny f32 or f64 add, sub, mul or div with a scalar, written into `lhs`
/// (an input reusable() proved unshared) on the calling thread; false, with
/// nothing written, for any other op, which takes scalar() instead.
bool scalar_tiny_in_place(const ScalarOp&, const Bytes& lhs);
Expected<Bytes> cast(Context&, CastOp&, const Inputs&);
Expected<Bytes> where(Context&, WhereOp&, const Inputs&);
Expected<Bytes> reduce(Context&, ReduceOp&, const Inputs&);
Expected<Bytes> softmax(Context&, SoftmaxOp&, const Inputs&);
Expected<Bytes> matmul(Context&, MatmulOp&, const Inputs&);
Expected<Bytes> view(Context&, ViewOp&, const Inputs&);
Expected<Bytes> slice_assign(Context&, SliceAssignOp&, const Inputs&);
Expected<Bytes> cat(Context&, CatOp&, const Inputs&);
Expected<Bytes> pad(Context&, PadOp&, const Inputs&);
Expected<Bytes> index(Context&, IndexOp&, const Inputs&);
Expected<Bytes> conv(Context&, ConvOp&, const Inputs&);
Expected<Bytes> pool(Context&, PoolOp&, const Inputs&);
Expected<Bytes> norm(Context&, NormOp&, const Inputs&);
Expected<Bytes> attention(Context&, AttentionOp&, const Inputs&);
Expected<Bytes> scan(Context&, ScanOp&, const Inputs&);
Expected<Bytes> sort(Context&, SortOp&, const Inputs&);

/// Whether `op` can run inside a fused chain (Backend::fusible): the
/// element-wise families (unary, binary and scalar ops, casts, where) with
/// inputs broadcast in a way the tile loop handles, except integer
/// divisions whose divisor may be zero.
bool fusible_elementwise(const OperationIr& op);
/// Runs a chain of fusible ops as one pass (Backend::execute_fused):
/// `inputs` describes the chain's external inputs, whose bytes are `in`.
Expected<Bytes> fused_elementwise(Context& ctx, std::span<OperationIr> chain, std::span<const TensorIr> inputs,
                                  const Inputs& in);

/// Aborts: a 16-bit float reached a kernel without being widened (a bug of
/// this backend, never of the input).
[[noreturn]] void half_reached_kernel(DType t);

/// Calls `f(T{})` with the C++ type a kernel computes in for `t`. The
/// 16-bit floats never get here: execute() runs their ops as f32 ops and
/// rounds once at the end (widen_halves), as PyTorch's CPU does.
template <class F>
decltype(auto) visit_compute_dtype(DType t, F&& f) {
  return visit_arithmetic_dtype(t, f, [&](DType other) -> decltype(f(float{})) { half_reached_kernel(other); });
}

/// The ops whose kernels compute run as f32 when an operand or the result is
/// f16 or bf16: operands are widened here (an operand promoted to a 16-bit
/// compute type is first rounded to it, as PyTorch's type promotion does),
/// `op`'s dtypes are rewritten, and `widened` owns the new input bytes
/// (pointed to by `bytes`). Returns the dtype the f32 result must be
/// narrowed to, or nothing when the op needs no widening.
std::optional<DType> widen_halves(Context& ctx, OperationIr& op, std::span<const Bytes*> bytes,
                                  std::span<bool> consumable, std::vector<Bytes>& widened);

/// What widen_halves does to one input's data: converted from `from` to
/// `through` first when set (an operand promoted to a 16-bit compute type),
/// then to f32; untouched unless `widened`.
struct InputWidening {
  DType from = DType::f32;
  std::optional<DType> through;
  bool widened = false;
};
/// widen_halves without the data: rewrites `op` the same way and fills
/// `inputs` (one per input, each_input order, value-initialised by the
/// caller). Fused chains apply the same conversions tile by tile.
std::optional<DType> plan_widening(OperationIr& op, std::span<InputWidening> inputs);

/// Converts `n` elements from one dtype to another (the cast kernel's core,
/// also used to bring mixed-dtype operands to their promoted type).
void convert(Context& ctx, const void* src, DType from, void* dst, DType to, int64_t n);
/// convert() on the calling thread: what each of its chunks runs.
void convert_range(const void* src, DType from, void* dst, DType to, int64_t n);
/// `src` as dtype `to` (shares the bytes when no conversion is needed).
Bytes as_dtype(Context& ctx, const Bytes& src, DType from, DType to, int64_t n);

}  // namespace switchyard::backends::cpu
