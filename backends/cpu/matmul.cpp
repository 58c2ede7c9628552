// SPDX-License-Identifier: Apache-2.0
// Batched matrix products: OpenBLAS for floating types, a blocked loop for
// integers, bias broadcast onto the result (linear). f32 products whose
// result rows are at least 8 wide run on the native AVX-512 GEMM where the
// CPU has it (f32_gemm.cpp): bench/gemm_bench measured it 1.2-2.5x faster
// than OpenBLAS with OPENBLAS_CORETYPE=Haswell at every shape from
// 64x10x512 to 2048^3 and 1x256x256 (docs/PERFORMANCE.md), but 0.85x at
// 64x4x64, where a row fills a quarter of one of its 16-lane vectors. When
// OpenBLAS itself runs AVX-512 kernels (OPENBLAS_CORETYPE=SkylakeX) matmuls
// stay with it: there it measured 1.0-1.4x the native kernel on the large
// products and 2-4x on the small ones (its small-matrix kernels).
// Convolutions use the native kernel either way (conv.cpp).

#include <algorithm>
#include <cblas.h>

#include "backends/cpu/chain_heads.hpp"
#include "backends/cpu/f32_gemm.hpp"
#include "backends/cpu/loops.hpp"
#include "backends/cpu/matmul_plan.hpp"
#include "backends/cpu/packed_weights.hpp"

namespace switchyard::backends::cpu {
namespace {

template <class T>
void int_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c) {
  std::fill(c, c + m * n, T(0));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const T av = ta ? a[p * m + i] : a[i * k + p];
      if (av == T(0)) continue;
      T* row = c + i * n;
      if (tb)
        for (int64_t j = 0; j < n; ++j) row[j] = static_cast<T>(row[j] + av * b[j * k + p]);
      else
        for (int64_t j = 0; j < n; ++j) row[j] = static_cast<T>(row[j] + av * b[p * n + j]);
    }
}

// Result columns below which OpenBLAS keeps f32 products (see above).
constexpr int64_t native_min_n = 8;

// c = a b [+ col_bias] for every batch entry on the native f32 GEMM, with
// `ep` (and `add`, laid out as c) applied as it stores; false when the
// kernel is off or the shape is one it is not used for. `b_block`, when
// given, is the block b lies in: a model's weight is then packed once and
// kept (ctx.packed).
bool matmul_native(Context& ctx, const MatmulOp& op, const MatmulDims& d, const float* a, const float* b, float* c,
                   const Bytes* b_block, const float* col_bias = nullptr, const float* add = nullptr,
                   F32GemmEpilogue ep = {}) {
  if (d.n < native_min_n || openblas_runs_avx512()) return false;
  F32Gemm g;
  g.m = d.m;
  g.n = d.n;
  g.k = d.k;
  g.batches = d.batches;
  g.lda = op.transpose_lhs ? d.m : d.k;
  g.a_transposed = op.transpose_lhs;
  g.ldb = op.transpose_rhs ? d.k : d.n;
  g.b_transposed = op.transpose_rhs;
  g.ldc = d.n;
  g.epilogue = ep;
  // One pointer captured: a std::function keeps that in place, where the
  // six references allocated a block per product.
  const auto locate = [&](int64_t batch) {
    const auto [ao, bo] = d.operands(batch);
    F32GemmOperands ops{a + ao * d.m * d.k, b + bo * d.k * d.n, c + batch * d.m * d.n, nullptr};
    ops.col_bias = col_bias;
    ops.add = add != nullptr ? add + batch * d.m * d.n : nullptr;
    return ops;
  };
  g.locate = [at = &locate](int64_t batch) { return (*at)(batch); };
  if (ctx.packed != nullptr && b_block != nullptr && b_block->as<float>() == b && native_f32_gemm_enabled()) {
    if (const size_t floats = packed_b_floats(g); floats > 0) {
      // The packing depends on K and on which way B lies (its block's size
      // then gives N).
      const uint64_t layout =
          uint64_t{2} << 60 | static_cast<uint64_t>(op.transpose_rhs) << 59 | static_cast<uint64_t>(d.k);
      g.packed_b = ctx.packed->find(*b_block, layout, floats, [&](float* out) { pack_b(g, out); });
    }
  }
  return gemm_f32(ctx.pool, g);
}

// A bias the GEMM's store can add: one value per result column, the same
// for every row (a linear layer's [n]); other shapes broadcast in a pass.
bool bias_per_column(const MatmulOp& op) {
  const auto& dims = op.bias.shape.dims;
  return op.has_bias() && !dims.empty() && dims.back() == op.out.shape.dims.back() && op.bias.numel() == dims.back();
}

}  // namespace

MatmulDims plan_matmul(const MatmulOp& op) {
  const auto& a = op.lhs.shape.dims;
  const auto& b = op.rhs.shape.dims;
  MatmulDims d;
  d.m = op.out.shape.dims[op.out.shape.rank() - 2];
  d.n = op.out.shape.dims[op.out.shape.rank() - 1];
  d.k = op.transpose_lhs ? a[a.size() - 2] : a[a.size() - 1];
  Shape batch{std::vector<int64_t>(op.out.shape.dims.begin(), op.out.shape.dims.end() - 2)};
  Shape ba{std::vector<int64_t>(a.begin(), a.end() - 2)};
  Shape bb{std::vector<int64_t>(b.begin(), b.end() - 2)};
  d.batch_dims = batch.dims;
  d.a_batch_strides = broadcast_strides(ba, batch);
  d.b_batch_strides = broadcast_strides(bb, batch);
  d.batches = batch.numel();
  // One rhs matrix for every lhs matrix, the lhs stacked without broadcast:
  // [B..., m, k] @ [k, n] is one [B * m, k] @ [k, n] product (the lhs and
  // the result are the same bytes either way). A [128, 1, 32] @ [32, 96]
  // (an exported attention's projection) ran as 128 one-row products.
  const bool rhs_shared =
      std::all_of(d.b_batch_strides.begin(), d.b_batch_strides.end(), [](int64_t s) { return s == 0; });
  // (A bias of more than one axis could differ per batch entry: the bf16
  // kernel adds it per row of each product.)
  const bool row_bias = !op.has_bias() || op.bias.shape.rank() <= 1;
  if (d.batches > 1 && rhs_shared && row_bias && !op.transpose_lhs && ba.numel() == d.batches) {
    d.m *= d.batches;
    d.batches = 1;
    d.batch_dims.clear();
    d.a_batch_strides.clear();
    d.b_batch_strides.clear();
  }
  return d;
}

Expected<Bytes> matmul(Context& ctx, MatmulOp& op, const Inputs& in) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  const MatmulDims d = plan_matmul(op);
  const int64_t a_mat = d.m * d.k, b_mat = d.k * d.n, c_mat = d.m * d.n;
  bool ok = true;
  visit_dtype(op.out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      ok = false;
    } else {
      const T* a = in.bytes[0]->as<const T>();
      const T* b = in.bytes[1]->as<const T>();
      T* c = writable<T>(out);
      auto one = [&](int64_t batch) {
        const auto [ao, bo] = d.operands(batch);
        // broadcast_strides count elements of the batch shape; scale to matrices.
        const T* pa = a + ao * a_mat;
        const T* pb = b + bo * b_mat;
        T* pc = c + batch * c_mat;
        const auto ta = op.transpose_lhs ? CblasTrans : CblasNoTrans;
        const auto tb = op.transpose_rhs ? CblasTrans : CblasNoTrans;
        const auto lda = static_cast<blasint>(op.transpose_lhs ? d.m : d.k);
        const auto ldb = static_cast<blasint>(op.transpose_rhs ? d.k : d.n);
        const auto m = static_cast<blasint>(d.m), n = static_cast<blasint>(d.n), k = static_cast<blasint>(d.k);
        // One row (a linear at batch 1): a matrix-vector product. OpenBLAS's
        // gemm packs the whole right operand on every call (the MLP's three
        // batch-1 linears: ~89k instructions a call in sgemm's copy and kernel);
        // its gemv reads it once. The lhs row is contiguous either way (as
        // [1, k], or transposed as [k, 1]). y is zeroed first: gemv's beta of 0
        // need not clear a NaN left in fresh memory.
        const auto gemv_rows = op.transpose_rhs ? n : k, gemv_cols = op.transpose_rhs ? k : n;
        const auto gemv_trans = op.transpose_rhs ? CblasNoTrans : CblasTrans;
        if constexpr (std::is_same_v<T, float>) {
          if (m == 1) {
            std::fill(pc, pc + n, 0.0f);
            cblas_sgemv(CblasRowMajor, gemv_trans, gemv_rows, gemv_cols, 1.0f, pb, ldb, pa, 1, 0.0f, pc, 1);
          } else {
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, pa, lda, pb, ldb, 0.0f, pc, n);
          }
        } else if constexpr (std::is_same_v<T, double>) {
          if (m == 1) {
            std::fill(pc, pc + n, 0.0);
            cblas_dgemv(CblasRowMajor, gemv_trans, gemv_rows, gemv_cols, 1.0, pb, ldb, pa, 1, 0.0, pc, 1);
          } else {
            cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, pa, lda, pb, ldb, 0.0, pc, n);
          }
        } else {
          int_gemm(op.transpose_lhs, op.transpose_rhs, d.m, d.n, d.k, pa, pb, pc);
        }
      };
      bool native = false, bias_added = false;
      if constexpr (std::is_same_v<T, float>) {
        const float* col_bias = bias_per_column(op) ? in.bytes[2]->as<const float>() : nullptr;
        native = c_mat > 0 && d.k > 0 && matmul_native(ctx, op, d, a, b, c, kept_block(in, 1), col_bias);
        bias_added = native && col_bias != nullptr;
      }
      if (d.k == 0) {
        std::fill(c, c + op.out.numel(), T(0));
      } else if (c_mat > 0 && !native) {
        for (int64_t i = 0; i < d.batches; ++i) one(i);
      }
      if (op.has_bias() && !bias_added) {
        const T* bias = in.bytes[2]->as<const T>();
        if (bias_per_column(op)) {
          // A linear's [n]: row by row, the same sums as the broadcast pass
          // below without its strided setup (~1,300 instructions a call, the
          // most of a batch-1 linear's bias on this path).
          const int64_t cols = d.n, rows = cols == 0 ? 0 : op.out.numel() / cols;
          ctx.pool.parallel_for(rows, std::max<int64_t>(1, parallel_grain / std::max<int64_t>(cols, 1)),
                                [&](int64_t b, int64_t e) {
                                  for (int64_t r = b; r < e; ++r) {
                                    T* row = c + r * cols;
                                    for (int64_t j = 0; j < cols; ++j) row[j] = static_cast<T>(row[j] + bias[j]);
                                  }
                                });
        } else {
          map2<T, T>(ctx, c, op.out.shape.strides(), bias, broadcast_strides(op.bias.shape, op.out.shape), c,
                     op.out.shape, [](T x, T y) { return static_cast<T>(x + y); });
        }
      }
    }
  });
  if (!ok) return DeviceError(Errc::unsupported, "cpu: matmul is not defined for bool");
  return out;
}

bool matmul_fusible_head(const MatmulOp& op) {
  const auto f32 = [](const TensorIr& t) { return t.dtype == DType::f32; };
  if (!f32(op.lhs) || !f32(op.rhs) || !f32(op.out) || (op.has_bias() && !f32(op.bias)) || op.out.numel() == 0 ||
      !native_f32_gemm_enabled() || openblas_runs_avx512())
    return false;
  const MatmulDims d = plan_matmul(op);
  return d.k > 0 && d.n >= native_min_n && (!op.has_bias() || bias_per_column(op));
}

Expected<Bytes> matmul_fused(Context& ctx, MatmulOp& op, const Inputs& in, const float* add, F32GemmEpilogue ep) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  const MatmulDims d = plan_matmul(op);
  // (matmul_fusible_head admitted only a bias per column.)
  const float* col_bias = op.has_bias() ? in.bytes[2]->as<const float>() : nullptr;
  float* c = writable<float>(out);
  if (!matmul_native(ctx, op, d, in.bytes[0]->as<const float>(), in.bytes[1]->as<const float>(), c, kept_block(in, 1),
                     col_bias, add, ep)) {
    // Switched off since the chain was planned (the tests toggle it).
    auto y = matmul(ctx, op, in);
    if (!y) return y;
    apply_epilogue(ctx.pool, writable<float>(*y), add, ep, op.out.numel());
    return y;
  }
  return out;
}

}  // namespace switchyard::backends::cpu
