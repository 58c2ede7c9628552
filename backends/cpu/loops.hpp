// SPDX-License-Identifier: Apache-2.0
#pragma once

// Parallel drivers over StridedLoop: split rows across the device's
// threads, or split the single row of a contiguous operation.

#include <array>

#include "backends/common/strided_loop.hpp"
#include "backends/cpu/kernels.hpp"

namespace switchyard::backends::cpu {

/// Calls f(offsets, n, inner_strides) over chunks covering the loop.
template <size_t N, class F>
void parallel_rows(Context& ctx, const StridedLoop<N>& loop, F&& f) {
  const auto strides = loop.inner_strides();
  const int64_t inner = loop.inner();
  const int64_t rows = loop.rows();
  if (rows == 1) {
    ctx.pool.parallel_for(inner, parallel_grain, [&](int64_t b, int64_t e) {
      std::array<int64_t, N> off{};
      for (size_t k = 0; k < N; ++k) off[k] = b * strides[k];
      f(off, e - b, strides);
    });
    return;
  }
  int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(inner, 1));
  ctx.pool.parallel_for(rows, grain, [&](int64_t b, int64_t e) {
    loop.for_rows(b, e, [&](const std::array<int64_t, N>& off, int64_t n) { f(off, n, strides); });
  });
}

/// out[i] = fn(in[i]) over contiguous operands: the common case, with no
/// stride bookkeeping (which allocates, and dominated tiny ops).
template <class T, class R, class Fn>
void flat1(Context& ctx, const T* in, R* out, int64_t n, Fn fn) {
  ctx.pool.parallel_for(n, parallel_grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = fn(in[i]);
  });
}

/// out[i] = fn(a[i], b[i]) over contiguous operands of one shape.
template <class T, class R, class Fn>
void flat2(Context& ctx, const T* a, const T* b, R* out, int64_t n, Fn fn) {
  ctx.pool.parallel_for(n, parallel_grain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) out[i] = fn(a[i], b[i]);
  });
}

/// Element-wise map over one input: out[i] = fn(in[i]), any strides.
template <class T, class R, class Fn>
void map1(Context& ctx, const T* in, const std::vector<int64_t>& in_strides, R* out, const Shape& shape, Fn fn) {
  StridedLoop<2> loop(shape.dims, {in_strides, shape.strides()});
  parallel_rows(ctx, loop, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& s) {
    const T* a = in + off[0];
    R* o = out + off[1];
    if (s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = fn(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[1]] = fn(a[i * s[0]]);
    }
  });
}

/// Element-wise map over two broadcast inputs.
template <class T, class R, class Fn>
void map2(Context& ctx, const T* a, const std::vector<int64_t>& sa, const T* b, const std::vector<int64_t>& sb, R* out,
          const Shape& shape, Fn fn) {
  StridedLoop<3> loop(shape.dims, {sa, sb, shape.strides()});
  parallel_rows(ctx, loop, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& s) {
    const T* x = a + off[0];
    const T* y = b + off[1];
    R* o = out + off[2];
    if (s[2] == 1 && s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i], y[i]);
    } else if (s[2] == 1 && s[0] == 1 && s[1] == 0) {
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i], yv);
    } else if (s[2] == 1 && s[0] == 0 && s[1] == 1) {
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = fn(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[2]] = fn(x[i * s[0]], y[i * s[1]]);
    }
  });
}

}  // namespace switchyard::backends::cpu
