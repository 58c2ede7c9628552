// SPDX-License-Identifier: Apache-2.0
#pragma once

// Kernels of the CPU backend, one function per op family. Each takes the
// op, its input bytes (in each_input order) and returns the output bytes.

#include "backends/common/host_buffer.hpp"
#include "backends/cpu/buffer_pool.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace switchyard::backends::cpu {

/// What a kernel needs from its device.
struct Context {
  ThreadPool& pool;
  BufferPool& buffers;
  uint64_t seed = 0;
  uint64_t random_ops = 0;  // random ops run since the seed
};

/// Inputs as bytes, each_input order; `consumable[i]` when input i may be
/// overwritten in place.
struct Inputs {
  std::span<const Bytes* const> bytes;
  std::span<const bool> consumable;
};

// Elements per chunk below which threads cost more than they save.
inline constexpr int64_t parallel_grain = 32768;

caf::expected<Bytes> fill(Context&, FillOp&);
caf::expected<Bytes> random(Context&, RandomOp&);
caf::expected<Bytes> unary(Context&, UnaryOp&, const Inputs&);
caf::expected<Bytes> binary(Context&, BinaryOp&, const Inputs&);
caf::expected<Bytes> scalar(Context&, ScalarOp&, const Inputs&);
caf::expected<Bytes> cast(Context&, CastOp&, const Inputs&);
caf::expected<Bytes> where(Context&, WhereOp&, const Inputs&);
caf::expected<Bytes> reduce(Context&, ReduceOp&, const Inputs&);
caf::expected<Bytes> softmax(Context&, SoftmaxOp&, const Inputs&);
caf::expected<Bytes> matmul(Context&, MatmulOp&, const Inputs&);
caf::expected<Bytes> view(Context&, ViewOp&, const Inputs&);
caf::expected<Bytes> slice_assign(Context&, SliceAssignOp&, const Inputs&);
caf::expected<Bytes> cat(Context&, CatOp&, const Inputs&);
caf::expected<Bytes> pad(Context&, PadOp&, const Inputs&);
caf::expected<Bytes> index(Context&, IndexOp&, const Inputs&);
caf::expected<Bytes> conv(Context&, ConvOp&, const Inputs&);
caf::expected<Bytes> pool(Context&, PoolOp&, const Inputs&);
caf::expected<Bytes> norm(Context&, NormOp&, const Inputs&);
caf::expected<Bytes> attention(Context&, AttentionOp&, const Inputs&);
caf::expected<Bytes> scan(Context&, ScanOp&, const Inputs&);
caf::expected<Bytes> sort(Context&, SortOp&, const Inputs&);

/// Converts `n` elements from one dtype to another (the cast kernel's core,
/// also used to bring mixed-dtype operands to their promoted type).
void convert(Context& ctx, const void* src, DType from, void* dst, DType to, int64_t n);
/// `src` as dtype `to` (shares the bytes when no conversion is needed).
Bytes as_dtype(Context& ctx, const Bytes& src, DType from, DType to, int64_t n);

}  // namespace switchyard::backends::cpu
