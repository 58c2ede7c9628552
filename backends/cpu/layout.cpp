// SPDX-License-Identifier: Apache-2.0
// Layout kernels: strided view copies, slice assignment, cat, pad and the
// index family (gather, scatter_add, index_select).

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/loops.hpp"

namespace switchyard::backends::cpu {
namespace {

// Copies elements of `elem` bytes between strided layouts; the typed
// dispatch by width keeps one instantiation per element size, not per dtype.
template <class F>
void by_width(size_t elem, F&& f) {
  switch (elem) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    case 8:
      f(uint64_t{});
      break;
    default:  // every dtype has one of the widths above
      std::abort();
  }
}

void strided_copy(Context& ctx, const std::byte* src, int64_t src_offset, const std::vector<int64_t>& src_strides,
                  std::byte* dst, int64_t dst_offset, const std::vector<int64_t>& dst_strides, const Shape& shape,
                  size_t elem) {
  by_width(elem, [&](auto tag) {
    using W = decltype(tag);
    const W* s = reinterpret_cast<const W*>(src) + src_offset;
    W* d = reinterpret_cast<W*>(dst) + dst_offset;
    StridedLoop<2> loop(shape.dims, {src_strides, dst_strides});
    parallel_rows(ctx, loop, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
      const W* ps = s + off[0];
      W* pd = d + off[1];
      if (st[0] == 1 && st[1] == 1)
        std::memcpy(pd, ps, static_cast<size_t>(n) * sizeof(W));
      else
        for (int64_t i = 0; i < n; ++i) pd[i * st[1]] = ps[i * st[0]];
    });
  });
}

int64_t read_index(const Bytes& b, DType t, int64_t i) {
  return t == DType::i64 ? b.as<const int64_t>()[i] : b.as<const int32_t>()[i];
}

DeviceError index_error(const char* op, int64_t value, int64_t extent, int64_t axis) {
  return DeviceError(Errc::index_out_of_range, std::string(op) + ": index " + std::to_string(value) +
                                                   " is out of range for extent " + std::to_string(extent) +
                                                   " of axis " + std::to_string(axis));
}

}  // namespace

namespace {

// Whether a view reads its input in order from the start: a reshape, also
// one whose axes of extent 1 carry another stride (a transpose of
// [1, 16, 128] to [16, 1, 128], as an exported encoder turns its batch
// axis), which reads nothing along them.
bool reads_in_order(const ViewOp& op) {
  if (op.offset != 0 || op.out.numel() != op.in.numel() || op.strides.size() != op.out.shape.rank()) return false;
  const auto contiguous = op.out.shape.strides();
  for (size_t k = 0; k < op.strides.size(); ++k)
    if (op.out.shape.dims[k] != 1 && op.strides[k] != contiguous[k]) return false;
  return true;
}

}  // namespace

Expected<Bytes> view(Context& ctx, ViewOp& op, const Inputs& in) {
  const auto& src = *in.bytes[0];
  if (reads_in_order(op)) return src;  // a reshape of contiguous data: share the block
  auto out = ctx.buffers.allocate(op.out.bytes());
  if (op.out.numel() > 0)
    strided_copy(ctx, src.data(), op.offset, op.strides, writable_data(out), 0, op.out.shape.strides(), op.out.shape,
                 size_of(op.out.dtype));
  return out;
}

Expected<Bytes> slice_assign(Context& ctx, SliceAssignOp& op, const Inputs& in) {
  Bytes out;
  if (in.consumable[0]) {
    out = *in.bytes[0];
  } else {
    out = ctx.buffers.allocate(op.out.bytes());
    if (op.out.bytes() > 0) std::memcpy(writable_data(out), in.bytes[0]->data(), op.out.bytes());
  }
  if (op.value.numel() > 0)
    strided_copy(ctx, in.bytes[1]->data(), 0, op.value.shape.strides(), writable_data(out), op.offset, op.strides,
                 op.value.shape, size_of(op.out.dtype));
  return out;
}

Expected<Bytes> cat(Context& ctx, CatOp& op, const Inputs& in) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  const size_t elem = size_of(op.out.dtype);
  const auto& od = op.out.shape.dims;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < op.axis; ++i) outer *= od[i];
  for (size_t i = op.axis + 1; i < od.size(); ++i) inner *= od[i];
  const int64_t out_row = od[op.axis] * inner * static_cast<int64_t>(elem);
  int64_t col = 0;
  for (size_t t = 0; t < op.inputs.size(); ++t) {
    const int64_t row = op.inputs[t].shape.dims[op.axis] * inner * static_cast<int64_t>(elem);
    const std::byte* src = in.bytes[t]->data();
    std::byte* dst = writable_data(out) + col;
    if (row > 0)
      ctx.pool.parallel_for(outer, std::max<int64_t>(1, parallel_grain / std::max<int64_t>(row, 1)),
                            [&](int64_t b, int64_t e) {
                              for (int64_t o = b; o < e; ++o)
                                std::memcpy(dst + o * out_row, src + o * row, static_cast<size_t>(row));
                            });
    col += row;
  }
  return out;
}

Expected<Bytes> pad(Context& ctx, PadOp& op, const Inputs& in) {
  FillOp fill_op{FillKind::full, op.out, op.value, 0};
  auto out = fill(ctx, fill_op);
  if (!out) return out;
  if (op.in.numel() == 0) return out;
  int64_t offset = 0;
  auto out_strides = op.out.shape.strides();
  for (size_t d = 0; d < op.before.size(); ++d) offset += op.before[d] * out_strides[d];
  strided_copy(ctx, in.bytes[0]->data(), 0, op.in.shape.strides(), writable_data(*out), offset, out_strides,
               op.in.shape, size_of(op.out.dtype));
  return out;
}

namespace {
// What a scatter kind makes of the current element and the incoming one:
// PyTorch's scatter (last write wins, in index order here), scatter_add and
// scatter_reduce's prod/amax/amin with include_self (NaN propagates).
template <class T>
T scatter_combine(IndexKind k, T cur, T in) {
  switch (k) {
    case IndexKind::scatter:
      return in;
    case IndexKind::scatter_prod:
      if constexpr (std::is_same_v<T, bool>)
        return cur && in;
      else
        return static_cast<T>(cur * in);
    case IndexKind::scatter_amax:
    case IndexKind::scatter_amin: {
      // f16 and bf16 included: their NaN propagates too, as in PyTorch.
      if constexpr (is_float_like_v<T>)
        if (std::isnan(static_cast<float>(in)) || std::isnan(static_cast<float>(cur)))
          return std::isnan(static_cast<float>(in)) ? in : cur;
      const bool mx = k == IndexKind::scatter_amax;
      return (mx ? in > cur : in < cur) ? in : cur;
    }
    default:  // scatter_add
      if constexpr (std::is_same_v<T, bool>)
        return cur || in;
      else
        return static_cast<T>(cur + in);
  }
}
}  // namespace

Expected<Bytes> index(Context& ctx, IndexOp& op, const Inputs& in) {
  const Bytes& src = *in.bytes[0];
  const Bytes& idx = *in.bytes[1];
  const size_t elem = size_of(op.in.dtype);
  const auto& ind = op.in.shape.dims;
  const int64_t axis_len = ind.empty() ? 1 : ind[op.axis];
  // A 0-d gather or scatter_add walks no axis below, but its one index must
  // still be in range (PyTorch: "index 5 is out of bounds").
  if (op.kind != IndexKind::index_select && op.index.shape.rank() == 0 && op.index.numel() == 1) {
    int64_t v = read_index(idx, op.index.dtype, 0);
    if (v < -axis_len || v >= axis_len) return index_error(to_string(op.kind), v, axis_len, op.axis);
  }
  switch (op.kind) {
    case IndexKind::index_select: {
      const int64_t count = op.index.numel();
      for (int64_t i = 0; i < count; ++i) {
        int64_t v = read_index(idx, op.index.dtype, i);
        if (v < -axis_len || v >= axis_len) return index_error("index_select", v, axis_len, op.axis);
      }
      auto out = ctx.buffers.allocate(op.out.bytes());
      if (ind.empty()) {  // a 0-d input has one element whatever the index holds
        std::memcpy(writable_data(out), src.data(), elem);
        return out;
      }
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < op.axis; ++i) outer *= ind[i];
      for (size_t i = op.axis + 1; i < ind.size(); ++i) inner *= ind[i];
      const size_t block = static_cast<size_t>(inner) * elem;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < count; ++i) {
          int64_t v = read_index(idx, op.index.dtype, i);
          if (v < 0) v += axis_len;
          std::memcpy(writable_data(out) + (o * count + i) * block, src.data() + (o * axis_len + v) * block, block);
        }
      return out;
    }
    case IndexKind::gather: {
      auto out = ctx.buffers.allocate(op.out.bytes());
      const auto in_strides = op.in.shape.strides();
      const auto& idims = op.index.shape.dims;
      const int64_t n = op.index.numel();
      DeviceError err;
      by_width(elem, [&](auto tag) {
        using W = decltype(tag);
        const W* s = src.as<const W>();
        W* o = writable<W>(out);
        for (int64_t flat = 0; flat < n && !err; ++flat) {
          int64_t rem = flat, off = 0;
          for (size_t d = idims.size(); d-- > 0;) {
            int64_t c = rem % idims[d];
            rem /= idims[d];
            if (static_cast<int64_t>(d) == op.axis) {
              int64_t v = read_index(idx, op.index.dtype, flat);
              if (v < -axis_len || v >= axis_len) {
                err = index_error("gather", v, axis_len, op.axis);
                return;
              }
              c = v < 0 ? v + axis_len : v;
            }
            off += c * in_strides[d];
          }
          o[flat] = s[off];
        }
      });
      if (err) return err;
      return out;
    }
    case IndexKind::scatter_add:
    case IndexKind::scatter:
    case IndexKind::scatter_prod:
    case IndexKind::scatter_amax:
    case IndexKind::scatter_amin: {
      auto out = ctx.buffers.allocate(op.out.bytes());
      if (op.out.bytes() > 0) std::memcpy(writable_data(out), src.data(), op.out.bytes());
      const Bytes& add = *in.bytes[2];
      const auto out_strides = op.out.shape.strides();
      const auto src_strides = op.src.shape.strides();
      const auto& idims = op.index.shape.dims;
      const int64_t n = op.index.numel();
      DeviceError err;
      visit_dtype(op.in.dtype, [&](auto tag) {
        using T = decltype(tag);
        const T* a = add.as<const T>();
        T* o = writable<T>(out);
        for (int64_t flat = 0; flat < n && !err; ++flat) {
          int64_t rem = flat, off = 0, soff = 0;
          for (size_t d = idims.size(); d-- > 0;) {
            int64_t c = rem % idims[d];
            rem /= idims[d];
            soff += c * src_strides[d];
            if (static_cast<int64_t>(d) == op.axis) {
              int64_t v = read_index(idx, op.index.dtype, flat);
              if (v < -axis_len || v >= axis_len) {
                err = index_error(to_string(op.kind), v, axis_len, op.axis);
                return;
              }
              c = v < 0 ? v + axis_len : v;
            }
            off += c * out_strides[d];
          }
          o[off] = scatter_combine(op.kind, o[off], a[soff]);
        }
      });
      if (err) return err;
      return out;
    }
  }
  return DeviceError(Errc::unsupported, "cpu: unknown index op");
}

}  // namespace switchyard::backends::cpu
