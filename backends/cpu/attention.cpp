// SPDX-License-Identifier: Apache-2.0
// scaled_dot_product_attention without the score matrix.
//
// Each task is one block of queries of one batch entry. It walks the keys in
// blocks, computing a block of scores with one GEMM, and keeps a running
// maximum and sum per query row (the online softmax): when a later block
// raises a row's maximum, what was accumulated so far is rescaled by
// exp(old - new). So at most Lb x Sb scores exist at a time per thread,
// instead of L x S per batch entry.
//
// Block sizes keep every GEMM at or below OpenBLAS 0.3's threshold for
// threading (m*n*k <= 4 * 65536): the tasks already run on the device's
// threads, and nested BLAS threads would only contend with them.

#include <cblas.h>
#include <cmath>
#include <limits>
#include <memory>
#include <span>

#include "backends/cpu/f32_gemm.hpp"
#include "backends/cpu/loops.hpp"
#include "backends/cpu/vector_math.hpp"

namespace switchyard::backends::cpu {
namespace {

/// c = a b (+ c when `accumulate`) on the native f32 GEMM, on this task's
/// thread, where matmuls take it (matmul.cpp: rows of at least 8, OpenBLAS
/// not itself on AVX-512); false when it does not run. OpenBLAS's small
/// products, called from both tasks at once, spent their time in its
/// buffer lock and in memset.
bool native_product(bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  if (n < 8 || openblas_runs_avx512()) return false;
  F32Gemm g = single_product(m, n, k, {a, lda, false}, {b, ldb, trans_b}, c, ldc);
  g.accumulate = accumulate;
  return gemm_f32_here(g);
}

template <class T>
void gemm(bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb,
          T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    // alpha scales the finished sums (as OpenBLAS's store does), so only
    // where C starts at 0.
    if ((beta == 0.0f || (beta == 1.0f && alpha == 1.0f)) &&
        native_product(trans_b, m, n, k, a, lda, b, ldb, beta == 1.0f, c, ldc)) {
      if (alpha != 1.0f)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) c[i * ldc + j] *= alpha;
      return;
    }
  }
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(k);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, M, N, K, alpha, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, M, N, K, alpha, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

constexpr int64_t blas_single_thread_mnk = int64_t{4} * 65536;

template <class T>
void run_attention(Context& ctx, const AttentionOp& op, const Inputs& in, T* y) {
  const T* q = in.bytes[0]->as<const T>();
  const T* k = in.bytes[1]->as<const T>();
  const T* v = in.bytes[2]->as<const T>();
  const size_t r = op.q.shape.rank();
  const int64_t L = op.q.shape.dims[r - 2], E = op.q.shape.dims[r - 1];
  const int64_t S = op.k.shape.dims[r - 2], Ev = op.v.shape.dims[r - 1];
  const int64_t batches = L == 0 ? 0 : op.out.numel() / std::max<int64_t>(L * Ev, 1);
  if (op.out.numel() == 0) return;
  if (S == 0) {  // softmax over no keys, times an empty V: zeros (as PyTorch's matmul)
    std::fill(y, y + op.out.numel(), T(0));
    return;
  }
  // Mask element (batch, i, j): strides of the mask broadcast to the scores.
  const void* mask = op.has_mask() ? in.bytes[3]->data() : nullptr;
  const bool bool_mask = op.has_mask() && op.mask.dtype == DType::boolean;
  Shape scores = op.q.shape;
  scores.dims[r - 1] = S;
  std::vector<int64_t> mstrides = op.has_mask() ? broadcast_strides(op.mask.shape, scores) : std::vector<int64_t>{};
  std::vector<int64_t> batch_dims(scores.dims.begin(), scores.dims.end() - 2);
  auto mask_base = [&](int64_t b) {
    int64_t off = 0;
    for (size_t d = batch_dims.size(); d-- > 0;) {
      off += (b % batch_dims[d]) * mstrides[d];
      b /= batch_dims[d];
    }
    return off;
  };

  const int64_t Lb = std::min<int64_t>(L, 64);
  const int64_t widest = std::max<int64_t>({E, Ev, 1});
  // (No wider than the keys: the score block is allocated per chunk.)
  const int64_t Sb =
      std::min(std::clamp<int64_t>(blas_single_thread_mnk / (Lb * widest) / 16 * 16, 16, 512), (S + 15) / 16 * 16);
  const int64_t q_blocks = (L + Lb - 1) / Lb;
  const T scale = static_cast<T>(op.scale);
  const T neg_inf = -std::numeric_limits<T>::infinity();

  ctx.pool.parallel_for(batches * q_blocks, 1, [&](int64_t lo, int64_t hi) {
    // Written before it is read: not zeroed (a 64 x 512 block was 128 KiB of memset per chunk).
    const auto scores = std::make_unique_for_overwrite<T[]>(static_cast<size_t>(Lb * Sb));
    const std::span<T> s(scores.get(), static_cast<size_t>(Lb * Sb));
    std::vector<T> row_max(static_cast<size_t>(Lb)), row_sum(static_cast<size_t>(Lb));
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / q_blocks;
      const int64_t i0 = (task % q_blocks) * Lb;
      const int64_t lb = std::min(Lb, L - i0);
      const T* qb = q + (b * L + i0) * E;
      const T* kb = k + b * S * E;
      const T* vb = v + b * S * Ev;
      T* acc = y + (b * L + i0) * Ev;
      std::fill(acc, acc + lb * Ev, T(0));
      std::fill(row_max.begin(), row_max.end(), neg_inf);
      std::fill(row_sum.begin(), row_sum.end(), T(0));
      const int64_t mb = op.has_mask() ? mask_base(b) : 0;
      // Causal: keys past the block's last query are masked for every row.
      const int64_t s_end = op.causal ? std::min(S, i0 + lb) : S;
      for (int64_t j0 = 0; j0 < s_end; j0 += Sb) {
        const int64_t sb = std::min(Sb, s_end - j0);
        if (E > 0)
          gemm<T>(true, lb, sb, E, scale, qb, E, kb + j0 * E, E, T(0), s.data(), Sb);
        else
          for (int64_t i = 0; i < lb; ++i) std::fill(s.data() + i * Sb, s.data() + i * Sb + sb, T(0));
        for (int64_t i = 0; i < lb; ++i) {
          T* row = s.data() + i * Sb;
          const int64_t qi = i0 + i;
          if (op.causal)
            for (int64_t j = std::max<int64_t>(0, qi + 1 - j0); j < sb; ++j) row[j] = neg_inf;
          if (mask != nullptr) {
            const int64_t base = mb + qi * mstrides[r - 2] + j0 * mstrides[r - 1];
            const int64_t js = mstrides[r - 1];
            if (bool_mask) {
              const auto* m = static_cast<const uint8_t*>(mask) + base;
              for (int64_t j = 0; j < sb; ++j)
                if (m[j * js] == 0) row[j] = neg_inf;
            } else {
              const T* m = static_cast<const T*>(mask) + base;
              for (int64_t j = 0; j < sb; ++j) row[j] += m[j * js];
            }
          }
          const T mx = std::max(row_max[i], vector_math::max(row, sb));
          if (mx == neg_inf) {  // every key so far masked: nothing to add
            std::fill(row, row + sb, T(0));
            continue;
          }
          const T correction = std::exp(row_max[i] - mx);  // 0 for the first unmasked block
          const T sum = vector_math::exp_sum(row, mx, row, sb);
          row_sum[i] = row_sum[i] * correction + sum;
          row_max[i] = mx;
          if (correction != T(1)) {
            T* a = acc + i * Ev;
            for (int64_t e = 0; e < Ev; ++e) a[e] *= correction;
          }
        }
        gemm<T>(false, lb, Ev, sb, T(1), s.data(), Sb, vb + j0 * Ev, Ev, T(1), acc, Ev);
      }
      for (int64_t i = 0; i < lb; ++i) {
        T* a = acc + i * Ev;
        // Every key masked: the softmax of only -inf is NaN, as in PyTorch.
        const T inv = row_sum[i] > T(0) ? T(1) / row_sum[i] : std::numeric_limits<T>::quiet_NaN();
        for (int64_t e = 0; e < Ev; ++e) a[e] *= inv;
      }
    }
  });
}

}  // namespace

Expected<Bytes> attention(Context& ctx, AttentionOp& op, const Inputs& in) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  if (op.q.dtype == DType::f32)
    run_attention<float>(ctx, op, in, writable<float>(out));
  else if (op.q.dtype == DType::f64)
    run_attention<double>(ctx, op, in, writable<double>(out));
  else
    return DeviceError(Errc::unsupported, "cpu: scaled_dot_product_attention needs floating inputs");
  return out;
}

}  // namespace switchyard::backends::cpu
