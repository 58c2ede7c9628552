// SPDX-License-Identifier: Apache-2.0
// Layout kernels (strided copies for view, slice_assign, cat and pad), the
// index family, the integer matrix product and cuBLAS pointer arrays.
// Copies dispatch on element width, not dtype: they move bits.

#include "backends/cuda/device_util.cuh"

namespace switchyard::backends::cuda::kern {
namespace {

template <class W>
__global__ void copy_kernel(const W* src, W* dst, Layout<2> layout, int64_t n) {
  SY_GRID_STRIDE(i, n) {
    int64_t off[2];
    offsets(layout, i, off);
    dst[off[1]] = src[off[0]];
  }
}

// Resolves a possibly negative index; flags it and returns -1 when out of range.
template <class I>
__device__ inline int64_t resolve(const I* index, int64_t i, int64_t len, int64_t* status) {
  int64_t v = static_cast<int64_t>(index[i]);
  if (v < -len || v >= len) {
    flag(status, v);
    return -1;
  }
  return v < 0 ? v + len : v;
}

template <class W, class I>
__global__ void index_select_kernel(const W* src, const I* index, W* out, int64_t outer, int64_t axis_len,
                                    int64_t count, int64_t inner) {
  const int64_t n = outer * count * inner;
  SY_GRID_STRIDE(i, n) {
    const int64_t r = i % inner;
    const int64_t j = (i / inner) % count;
    const int64_t o = i / (inner * count);
    int64_t v = static_cast<int64_t>(index[j]);
    if (v < 0) v += axis_len;
    // Out of range: check_indices, launched before, flags the first one.
    out[i] = (v < 0 || v >= axis_len) ? W(0) : src[(o * axis_len + v) * inner + r];
  }
}

// One block: each thread finds the first bad index of its stride, the block
// takes the smallest position, so the report does not depend on scheduling.
template <class I>
__global__ void check_indices_kernel(const I* index, int64_t count, int64_t axis_len, int64_t* status) {
  __shared__ unsigned long long first;
  if (threadIdx.x == 0) first = ~0ULL;
  __syncthreads();
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const auto v = static_cast<int64_t>(index[j]);
    if (v < -axis_len || v >= axis_len) {
      atomicMin(&first, static_cast<unsigned long long>(j));
      break;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && first != ~0ULL) flag(status, static_cast<int64_t>(index[first]));
}

__global__ void bad_pointer_kernel(int* bad) { *bad = 1; }

__global__ void init_check_kernel(int64_t* record, int64_t extent, int64_t meta) {
  record[0] = 0;
  record[1] = 0;
  record[2] = extent;
  record[3] = meta;
}

__global__ void fold_checks_kernel(CheckSources in, int64_t* out) {
  for (int k = 0; k < in.count; ++k)
    if (in.records[k][0] != 0) {
      for (int w = 0; w < check_record_words; ++w) out[w] = in.records[k][w];
      return;
    }
  for (int w = 0; w < check_record_words; ++w) out[w] = 0;
}

template <class W, class I>
__global__ void gather_kernel(const W* src, const I* index, W* out, Layout<1> layout, int64_t axis_stride,
                              int64_t axis_len, int64_t n, int64_t* status) {
  SY_GRID_STRIDE(i, n) {
    int64_t off[1];
    offsets(layout, i, off);
    const int64_t v = resolve(index, i, axis_len, status);
    out[i] = v < 0 ? W(0) : src[off[0] + v * axis_stride];
  }
}

// Atomic accumulation for every dtype: native atomics where they exist
// (f16 and bf16 round each addition to their type, as the CPU's Half +=
// does; bf16's needs sm_80, the oldest architecture built), a
// compare-and-swap on the enclosing aligned 32-bit word for 1- and 2-byte
// integers (the pool rounds every allocation to 16 bytes, so that word is
// always inside it; a 2-byte element never straddles two words).
template <class T>
__device__ inline void atomic_accumulate(T* p, T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || is_half16_v<T>) {
    atomicAdd(p, v);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    atomicAdd(reinterpret_cast<unsigned int*>(p), static_cast<unsigned int>(v));
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    auto addr = reinterpret_cast<uintptr_t>(p);
    auto* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t{3});
    const unsigned shift = static_cast<unsigned>(addr & 3) * 8;
    if constexpr (std::is_same_v<T, bool>) {
      if (v) atomicOr(word, 1u << shift);
    } else {
      constexpr unsigned mask = sizeof(T) == 1 ? 0xFFu : 0xFFFFu;
      unsigned old = *word, assumed;
      do {
        assumed = old;
        const unsigned sum = ((assumed >> shift) + static_cast<unsigned>(v)) & mask;  // wraps like T
        old = atomicCAS(word, assumed, (assumed & ~(mask << shift)) | (sum << shift));
      } while (old != assumed);
    }
  }
}

template <class T, class I>
__global__ void scatter_add_kernel(const T* add, const I* index, T* out, Layout<2> layout, int64_t axis_stride,
                                   int64_t axis_len, int64_t n, int64_t* status) {
  SY_GRID_STRIDE(i, n) {
    int64_t off[2];
    offsets(layout, i, off);
    const int64_t v = resolve(index, i, axis_len, status);
    if (v >= 0) atomic_accumulate(out + off[0] + v * axis_stride, add[off[1]]);
  }
}

// One thread per output element; integer matmuls are rare and small, so
// clarity wins over tiling here. Accumulation wraps at T's width, which
// gives the same bits as accumulating wider and wrapping once (PyTorch's
// integer matmul keeps T too).
template <class T>
__global__ void int_matmul_kernel(const T* a, const T* b, T* c, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                  Layout<2> batch, int64_t total) {
  SY_GRID_STRIDE(i, total) {
    const int64_t j = i % n, r = (i / n) % m, bi = i / (m * n);
    int64_t off[2];
    offsets(batch, bi, off);
    const T* pa = a + off[0] * m * k;
    const T* pb = b + off[1] * k * n;
    Wide<T> acc = 0;
    for (int64_t p = 0; p < k; ++p) {
      const T av = ta ? pa[p * m + r] : pa[r * k + p];
      const T bv = tb ? pb[j * k + p] : pb[p * n + j];
      acc = static_cast<Wide<T>>(acc + static_cast<Wide<T>>(av) * static_cast<Wide<T>>(bv));
    }
    c[i] = static_cast<T>(acc);
  }
}

__global__ void batch_pointers_kernel(const char* a, const char* b, char* c, int64_t a_bytes, int64_t b_bytes,
                                      int64_t c_bytes, Layout<2> batch, int64_t batches, void** ptrs) {
  SY_GRID_STRIDE(i, batches) {
    int64_t off[2];
    offsets(batch, i, off);
    ptrs[i] = const_cast<char*>(a + off[0] * a_bytes);
    ptrs[batches + i] = const_cast<char*>(b + off[1] * b_bytes);
    ptrs[2 * batches + i] = c + i * c_bytes;
  }
}

template <class F>
cudaError_t by_index(DType t, F&& f) {
  if (t == DType::i64) return f(int64_t{});
  if (t == DType::i32) return f(int32_t{});
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t copy_strided(Launch l, size_t width, const void* src, int64_t src_offset, void* dst, int64_t dst_offset,
                         const Layout<2>& layout, int64_t n) {
  return by_width(width, [&](auto tag) {
    using W = decltype(tag);
    return launch(l, n, copy_kernel<W>, static_cast<const W*>(src) + src_offset, static_cast<W*>(dst) + dst_offset,
                  layout, n);
  });
}

cudaError_t index_select(Launch l, size_t width, DType index_t, const void* src, const void* index, void* out,
                         int64_t outer, int64_t axis_len, int64_t count, int64_t inner) {
  return by_width(width, [&](auto w) {
    using W = decltype(w);
    return by_index(index_t, [&](auto ix) {
      using I = decltype(ix);
      return launch(l, outer * count * inner, index_select_kernel<W, I>, static_cast<const W*>(src),
                    static_cast<const I*>(index), static_cast<W*>(out), outer, axis_len, count, inner);
    });
  });
}

cudaError_t check_indices(Launch l, DType index_t, const void* index, int64_t count, int64_t axis_len,
                          int64_t* status) {
  if (count <= 0) return cudaSuccess;
  return by_index(index_t, [&](auto ix) {
    using I = decltype(ix);
    check_indices_kernel<I><<<1, block_threads, 0, l.stream>>>(static_cast<const I*>(index), count, axis_len, status);
    return cudaGetLastError();
  });
}

cudaError_t write_through_bad_pointer(Launch l) {
  bad_pointer_kernel<<<1, 1, 0, l.stream>>>(reinterpret_cast<int*>(uintptr_t{16}));
  return cudaGetLastError();
}

cudaError_t init_check(Launch l, int64_t* record, int64_t extent, int64_t meta) {
  init_check_kernel<<<1, 1, 0, l.stream>>>(record, extent, meta);
  return cudaGetLastError();
}

cudaError_t fold_checks(Launch l, const CheckSources& in, int64_t* out) {
  fold_checks_kernel<<<1, 1, 0, l.stream>>>(in, out);
  return cudaGetLastError();
}

cudaError_t gather(Launch l, size_t width, DType index_t, const void* src, const void* index, void* out,
                   const Layout<1>& layout, int64_t axis_stride, int64_t axis_len, int64_t n, int64_t* status) {
  return by_width(width, [&](auto w) {
    using W = decltype(w);
    return by_index(index_t, [&](auto ix) {
      using I = decltype(ix);
      return launch(l, n, gather_kernel<W, I>, static_cast<const W*>(src), static_cast<const I*>(index),
                    static_cast<W*>(out), layout, axis_stride, axis_len, n, status);
    });
  });
}

cudaError_t scatter_add(Launch l, DType t, DType index_t, const void* add, const void* index, void* out,
                        const Layout<2>& layout, int64_t axis_stride, int64_t axis_len, int64_t n, int64_t* status) {
  return by_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    return by_index(index_t, [&](auto ix) {
      using I = decltype(ix);
      return launch(l, n, scatter_add_kernel<T, I>, static_cast<const T*>(add), static_cast<const I*>(index),
                    static_cast<T*>(out), layout, axis_stride, axis_len, n, status);
    });
  });
}

cudaError_t int_matmul(Launch l, DType t, const void* a, const void* b, void* c, bool ta, bool tb, int64_t m, int64_t n,
                       int64_t k, const Layout<2>& batch, int64_t batches) {
  auto run = [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    return launch(l, batches * m * n, int_matmul_kernel<T>, static_cast<const T*>(a), static_cast<const T*>(b),
                  static_cast<T*>(c), ta, tb, m, n, k, batch, batches * m * n);
  };
  switch (t) {
    case DType::i32:
      return run(int32_t{});
    case DType::i64:
      return run(int64_t{});
    case DType::u8:
      return run(uint8_t{});
    case DType::i8:
      return run(int8_t{});
    case DType::i16:
      return run(int16_t{});
    default:
      return cudaErrorNotSupported;
  }
}

cudaError_t batch_pointers(Launch l, size_t width, const void* a, const void* b, void* c, int64_t a_mat, int64_t b_mat,
                           int64_t c_mat, const Layout<2>& batch, int64_t batches, void** ptrs) {
  const auto w = static_cast<int64_t>(width);
  return launch(l, batches, batch_pointers_kernel, static_cast<const char*>(a), static_cast<const char*>(b),
                static_cast<char*>(c), a_mat * w, b_mat * w, c_mat * w, batch, batches, ptrs);
}

}  // namespace switchyard::backends::cuda::kern
