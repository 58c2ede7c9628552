// SPDX-License-Identifier: Apache-2.0
// Normalisation, attention, cumsum/cumprod and argsort/topk of the
// reference backend: every element from its definition, in double (or
// wrapping int64), with no blocking, no online rescaling and no threads.

#include "backends/reference/module_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/common/host_buffer.hpp"
#include "backends/common/number_conversion.hpp"
#include "backends/reference/indexing.hpp"

namespace switchyard::backends::reference {
namespace {

double load_f(const Bytes& b, DType t, int64_t k) {
  return visit_dtype(t, [&](auto tag) { return static_cast<double>(b.as<const decltype(tag)>()[k]); });
}

void store_f(const Bytes& b, DType t, int64_t k, double v) {
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    writable<T>(b)[k] = convert_element<double, T>(v);
  });
}

}  // namespace

Expected<Bytes> run_norm(const NormOp& op, const InputBytes& in) {
  const DType t = op.in.dtype;
  const Bytes& x = *in[0];
  size_t next = 1;
  const Bytes* mean = nullptr;
  const Bytes* var = nullptr;
  if (op.kind == NormKind::batch) {
    mean = in[next++];
    var = in[next++];
  }
  const Bytes* w = op.has_weight() ? in[next++] : nullptr;
  const Bytes* b = op.has_bias() ? in[next++] : nullptr;
  auto out = Bytes::allocate(op.out.bytes());
  const Shape& s = op.in.shape;
  const int64_t n = s.numel();
  // For every element: the set it is normalised over (a "slice" number) and
  // the index of its weight/bias. Slices are contiguous runs of `size`.
  int64_t size = 1;  // elements per slice
  switch (op.kind) {
    case NormKind::layer:
    case NormKind::rms:
      for (size_t d = s.rank() - op.count; d < s.rank(); ++d) size *= s.dims[d];
      break;
    case NormKind::group:
      size = n / std::max<int64_t>(s.dims[0] * op.count, 1);
      break;
    case NormKind::batch:
      size = 1;
      break;
  }
  int64_t spatial = 1;
  for (size_t d = 2; d < s.rank(); ++d) spatial *= s.dims[d];
  for (int64_t k = 0; k < n; ++k) {
    double y = 0;
    int64_t param = 0;  // index into weight / bias
    const double v = load_f(x, t, k);
    if (op.kind == NormKind::batch) {
      const int64_t c = (k / spatial) % s.dims[1];
      param = c;
      y = (v - load_f(*mean, t, c)) / std::sqrt(load_f(*var, t, c) + op.eps);
    } else {
      const int64_t first = k / size * size;
      double m = 0, sq = 0;
      for (int64_t i = first; i < first + size; ++i) m += load_f(x, t, i);
      m /= static_cast<double>(size);
      if (op.kind == NormKind::rms) {
        for (int64_t i = first; i < first + size; ++i) sq += load_f(x, t, i) * load_f(x, t, i);
        y = v / std::sqrt(sq / static_cast<double>(size) + op.eps);
      } else {
        for (int64_t i = first; i < first + size; ++i) sq += (load_f(x, t, i) - m) * (load_f(x, t, i) - m);
        y = (v - m) / std::sqrt(sq / static_cast<double>(size) + op.eps);
      }
      param = op.kind == NormKind::group ? (k / spatial) % s.dims[1] : k % size;
    }
    if (w) y *= load_f(*w, t, param);
    if (b) y += load_f(*b, t, param);
    store_f(out, t, k, y);
  }
  return out;
}

Expected<Bytes> run_attention(const AttentionOp& op, const InputBytes& in) {
  const DType t = op.q.dtype;
  const size_t r = op.q.shape.rank();
  const int64_t L = op.q.shape.dims[r - 2], E = op.q.shape.dims[r - 1];
  const int64_t S = op.k.shape.dims[r - 2], Ev = op.v.shape.dims[r - 1];
  int64_t nb = 1;
  for (size_t d = 0; d + 2 < r; ++d) nb *= op.q.shape.dims[d];
  Shape scores = op.q.shape;
  scores.dims[r - 1] = S;
  const auto mstrides = op.has_mask() ? broadcast_strides(op.mask.shape, scores) : std::vector<int64_t>{};
  auto out = Bytes::allocate(op.out.bytes());
  std::vector<double> p(static_cast<size_t>(S));
  for (int64_t bt = 0; bt < nb; ++bt)
    for (int64_t i = 0; i < L; ++i) {
      // The full row of scores, then a textbook softmax over it.
      for (int64_t j = 0; j < S; ++j) {
        double dotp = 0;
        for (int64_t e = 0; e < E; ++e)
          dotp += load_f(*in[0], t, (bt * L + i) * E + e) * load_f(*in[1], t, (bt * S + j) * E + e);
        double sc = dotp * op.scale;
        if (op.causal && j > i) sc = -std::numeric_limits<double>::infinity();
        if (op.has_mask()) {
          auto idx = unravel((bt * L + i) * S + j, scores);
          const double m = load_f(*in[3], op.mask.dtype, dot(idx, mstrides));
          if (op.mask.dtype == DType::boolean)
            sc = m != 0 ? sc : -std::numeric_limits<double>::infinity();
          else
            sc += m;
        }
        p[j] = sc;
      }
      const double mx = S > 0 ? *std::max_element(p.begin(), p.end()) : 0.0;
      double sum = 0;
      for (auto& v : p) {
        v = std::exp(v - mx);  // all -inf: exp(NaN) = NaN, the answer
        sum += v;
      }
      for (int64_t e = 0; e < Ev; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += p[j] / sum * load_f(*in[2], t, (bt * S + j) * Ev + e);
        store_f(out, t, (bt * L + i) * Ev + e, acc);
      }
    }
  return out;
}

Expected<Bytes> run_scan(const ScanOp& op, const InputBytes& in) {
  const Shape& s = op.in.shape;
  const int64_t n = s.numel();
  const int64_t len = s.rank() == 0 ? 1 : s.dims[op.axis];
  int64_t inner = 1;
  for (size_t d = op.axis + 1; d < s.rank(); ++d) inner *= s.dims[d];
  const bool prod = op.kind == ScanKind::cumprod;
  auto out = Bytes::allocate(op.out.bytes());
  const bool floating = is_floating(op.out.dtype);
  // Each element from the definition: the sum (product) of the elements
  // before it on its line, each first converted to the output dtype.
  for (int64_t k = 0; k < n; ++k) {
    const int64_t pos = (k / inner) % len;
    const int64_t first = k - pos * inner;
    double f = prod ? 1 : 0;
    uint64_t i = prod ? 1 : 0;  // wrapping integer arithmetic
    for (int64_t p = 0; p <= pos; ++p) {
      visit_dtype(op.in.dtype, [&](auto itag) {
        using I = decltype(itag);
        const I v = in[0]->as<const I>()[first + p * inner];
        visit_dtype(op.out.dtype, [&](auto otag) {
          using O = decltype(otag);
          const O c = convert_element<I, O>(v);
          if (floating) {
            f = prod ? f * static_cast<double>(c) : f + static_cast<double>(c);
          } else {
            const auto u = static_cast<uint64_t>(static_cast<int64_t>(c));
            i = prod ? i * u : i + u;
          }
        });
      });
    }
    visit_dtype(op.out.dtype, [&](auto otag) {
      using O = decltype(otag);
      writable<O>(out)[k] = floating ? static_cast<O>(f) : static_cast<O>(static_cast<int64_t>(i));
    });
  }
  return out;
}

Expected<Bytes> run_sort(const SortOp& op, const InputBytes& in) {
  const Shape& s = op.in.shape;
  const int64_t len = s.rank() == 0 ? 1 : s.dims[op.axis];
  int64_t inner = 1, outer = 1;
  for (size_t d = op.axis + 1; d < s.rank(); ++d) inner *= s.dims[d];
  for (int64_t d = 0; d < op.axis && static_cast<size_t>(d) < s.rank(); ++d) outer *= s.dims[d];
  const int64_t keep = op.kind == SortKind::topk && s.rank() > 0 ? op.k : len;  // 0-d: its one position
  auto out = Bytes::allocate(op.out.bytes());
  // Ranks by a stable sort of positions: "a before b" when a is smaller
  // (larger when descending), NaN above every number.
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      // long double holds every i64 exactly (x86's 64-bit mantissa).
      std::vector<long double> v(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i)
        v[i] = visit_dtype(op.in.dtype, [&](auto tag) {
          return static_cast<long double>(in[0]->as<const decltype(tag)>()[(o * len + i) * inner + c]);
        });
      auto smaller = [](long double a, long double b) {
        if (std::isnan(a)) return false;
        return std::isnan(b) || a < b;
      };
      std::vector<int64_t> pos(static_cast<size_t>(len));
      std::iota(pos.begin(), pos.end(), 0);
      std::stable_sort(pos.begin(), pos.end(),
                       [&](int64_t a, int64_t b) { return op.descending ? smaller(v[b], v[a]) : smaller(v[a], v[b]); });
      for (int64_t i = 0; i < keep; ++i) writable<int64_t>(out)[(o * keep + i) * inner + c] = pos[i];
    }
  return out;
}

}  // namespace switchyard::backends::reference
