// SPDX-License-Identifier: Apache-2.0
// cumsum / cumprod (one linear pass per line) and argsort / topk (a sort
// per line), parallel over independent lines.

#include <algorithm>
#include <cmath>
#include <utility>

#include "backends/common/number_conversion.hpp"
#include "backends/cpu/loops.hpp"

namespace switchyard::backends::cpu {
namespace {

/// outer x len x inner view of a tensor around `axis`.
struct Lines {
  int64_t outer = 1, len = 1, inner = 1;
};

Lines lines_of(const Shape& s, int64_t axis) {
  Lines l;
  if (s.rank() == 0) return l;
  for (int64_t i = 0; i < axis; ++i) l.outer *= s.dims[i];
  l.len = s.dims[axis];
  for (size_t i = axis + 1; i < s.rank(); ++i) l.inner *= s.dims[i];
  return l;
}

// The accumulator: double for floating outputs (PyTorch's CPU acc_type for
// f32 too), int64 with wrapping for integers (stored modulo the width).
template <class O>
using ScanAcc = std::conditional_t<std::is_floating_point_v<O>, double, uint64_t>;

template <class I, class O>
void scan_typed(Context& ctx, const ScanOp& op, const I* x, O* y) {
  const Lines l = lines_of(op.in.shape, op.axis);
  const bool prod = op.kind == ScanKind::cumprod;
  using A = ScanAcc<O>;
  auto load = [](I v) -> A {
    if constexpr (std::is_floating_point_v<O>)
      return static_cast<A>(convert_element<I, O>(v));
    else
      return static_cast<A>(static_cast<int64_t>(convert_element<I, O>(v)));
  };
  // Work units: (outer index, block of inner lanes); each walks its lanes
  // along the axis together, which reads memory in order when inner > 1.
  constexpr int64_t lane_block = 1024;
  const int64_t blocks = (l.inner + lane_block - 1) / lane_block;
  const int64_t grain =
      std::max<int64_t>(1, parallel_grain / std::max<int64_t>(l.len * std::min(l.inner, lane_block), 1));
  ctx.pool.parallel_for(l.outer * blocks, grain, [&](int64_t lo, int64_t hi) {
    std::vector<A> acc(static_cast<size_t>(std::min(l.inner, lane_block)));
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t o = u / blocks;
      const int64_t c0 = (u % blocks) * lane_block;
      const int64_t lanes = std::min(lane_block, l.inner - c0);
      std::fill(acc.begin(), acc.begin() + lanes, prod ? A(1) : A(0));
      const int64_t base = o * l.len * l.inner + c0;
      for (int64_t i = 0; i < l.len; ++i) {
        const I* px = x + base + i * l.inner;
        O* py = y + base + i * l.inner;
        for (int64_t c = 0; c < lanes; ++c) {
          acc[c] = prod ? static_cast<A>(acc[c] * load(px[c])) : static_cast<A>(acc[c] + load(px[c]));
          if constexpr (std::is_floating_point_v<O>)
            py[c] = static_cast<O>(acc[c]);
          else
            py[c] = static_cast<O>(static_cast<int64_t>(acc[c]));
        }
      }
    }
  });
}

// NaN is larger than every number (PyTorch's sort and topk order).
template <class T>
bool less_nan_last(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

template <class T>
void sort_typed(Context& ctx, const SortOp& op, const T* x, int64_t* y) {
  const Lines l = lines_of(op.in.shape, op.axis);
  // A 0-d input has one position, whatever k (0 or 1) says, as in PyTorch.
  const int64_t keep = op.kind == SortKind::topk && op.in.shape.rank() > 0 ? op.k : l.len;
  const bool desc = op.descending;
  using Item = std::pair<T, int64_t>;
  // Ties go by index: the order is total, so partial sorts are stable too.
  auto before = [desc](const Item& a, const Item& b) {
    if (desc ? less_nan_last(b.first, a.first) : less_nan_last(a.first, b.first)) return true;
    if (desc ? less_nan_last(a.first, b.first) : less_nan_last(b.first, a.first)) return false;
    return a.second < b.second;
  };
  // Whether a candidate that comes after every element seen so far (larger
  // index) loses against the heap's worst: one comparison for most elements.
  auto loses = [desc](T v, T worst) {
    if constexpr (std::is_floating_point_v<T>) {
      if (desc) return std::isnan(worst) || (!(v > worst) && !std::isnan(v));
      return std::isnan(worst) ? std::isnan(v) : !(v < worst);
    } else {
      return desc ? !(v > worst) : !(v < worst);
    }
  };
  const int64_t lines = l.outer * l.inner;
  const int64_t threads = static_cast<int64_t>(ctx.pool.threads());
  if (lines == 1 && keep == l.len && l.len >= 65536 && threads > 1) {
    // One long line: sort one run per thread, then merge the runs. The order
    // is total (ties by index), so this equals a single sort.
    std::vector<Item> items(static_cast<size_t>(l.len));
    for (int64_t i = 0; i < l.len; ++i) items[i] = {x[i], i};
    auto bound = [&](int64_t r) { return items.begin() + l.len * r / threads; };
    ctx.pool.parallel_for(threads, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) std::sort(bound(r), bound(r + 1), before);
    });
    for (int64_t r = 1; r < threads; ++r) std::inplace_merge(bound(0), bound(r), bound(r + 1), before);
    for (int64_t i = 0; i < l.len; ++i) y[i] = items[i].second;
    return;
  }
  if (lines == 1 && keep > 0 && keep * 8 <= l.len && l.len >= 65536 && threads > 1) {
    // One long line, few wanted: each thread keeps the best `keep` of its
    // run in a heap, then the candidates are ordered together.
    std::vector<std::vector<Item>> best(static_cast<size_t>(threads));
    ctx.pool.parallel_for(threads, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        auto& h = best[r];
        const int64_t b = l.len * r / threads, e = l.len * (r + 1) / threads;
        for (int64_t i = b; i < e; ++i) {
          if (static_cast<int64_t>(h.size()) == keep && loses(x[i], h.front().first)) continue;
          const Item cand{x[i], i};
          if (static_cast<int64_t>(h.size()) < keep) {
            h.push_back(cand);
            std::push_heap(h.begin(), h.end(), before);
          } else if (before(cand, h.front())) {
            std::pop_heap(h.begin(), h.end(), before);
            h.back() = cand;
            std::push_heap(h.begin(), h.end(), before);
          }
        }
      }
    });
    std::vector<Item> all;
    for (auto& h : best) all.insert(all.end(), h.begin(), h.end());
    std::partial_sort(all.begin(), all.begin() + keep, all.end(), before);
    for (int64_t i = 0; i < keep; ++i) y[i] = all[i].second;
    return;
  }
  const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(l.len, 1));
  ctx.pool.parallel_for(lines, grain, [&](int64_t lo, int64_t hi) {
    std::vector<Item> items;
    items.reserve(static_cast<size_t>(l.len));
    for (int64_t line = lo; line < hi; ++line) {
      const int64_t o = line / l.inner, c = line % l.inner;
      const T* px = x + o * l.len * l.inner + c;
      if (keep > 0 && keep * 8 <= l.len) {
        // Few wanted: a heap of the best `keep` so far, whose root is the
        // worst of them; most elements lose one comparison with the root
        // and are never copied.
        items.clear();
        for (int64_t i = 0; i < keep; ++i) items.push_back({px[i * l.inner], i});
        std::make_heap(items.begin(), items.end(), before);
        for (int64_t i = keep; i < l.len; ++i) {
          if (loses(px[i * l.inner], items.front().first)) continue;
          const Item cand{px[i * l.inner], i};
          if (before(cand, items.front())) {
            std::pop_heap(items.begin(), items.end(), before);
            items.back() = cand;
            std::push_heap(items.begin(), items.end(), before);
          }
        }
        std::sort_heap(items.begin(), items.end(), before);
      } else {
        items.resize(static_cast<size_t>(l.len));
        for (int64_t i = 0; i < l.len; ++i) items[i] = {px[i * l.inner], i};
        if (keep == l.len)
          std::sort(items.begin(), items.end(), before);
        else if (keep > 0)
          std::partial_sort(items.begin(), items.begin() + keep, items.end(), before);
      }
      int64_t* py = y + o * keep * l.inner + c;
      for (int64_t i = 0; i < keep; ++i) py[i * l.inner] = items[i].second;
    }
  });
}

}  // namespace

Expected<Bytes> scan(Context& ctx, ScanOp& op, const Inputs& in) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  bool ok = true;
  visit_dtype(op.in.dtype, [&](auto itag) {
    using I = decltype(itag);
    visit_dtype(op.out.dtype, [&](auto otag) {
      using O = decltype(otag);
      if constexpr (std::is_same_v<O, bool>)
        ok = false;
      else
        scan_typed<I, O>(ctx, op, in.bytes[0]->as<const I>(), writable<O>(out));
    });
  });
  if (!ok) return DeviceError(Errc::unsupported, "cpu: cumsum/cumprod cannot compute in bool");
  return out;
}

Expected<Bytes> sort(Context& ctx, SortOp& op, const Inputs& in) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  visit_dtype(op.in.dtype, [&](auto tag) {
    using T = decltype(tag);
    sort_typed<T>(ctx, op, in.bytes[0]->as<const T>(), writable<int64_t>(out));
  });
  return out;
}

}  // namespace switchyard::backends::cpu
