// SPDX-License-Identifier: Apache-2.0
// Normalisation, fused attention, cumsum/cumprod and argsort/topk on the GPU.
//
//   norms      one block per normalised slice (row or group), two-pass
//              statistics in double, batch_norm element-wise;
//   attention  one warp per query row, the warps of a block sharing tiles
//              of K and V in shared memory, online softmax: no score matrix
//              in global memory;
//   scans      one block per line, cub::BlockScan over chunks of the line
//              with the running prefix carried between chunks;
//   sort/topk  one stable cub::DeviceMergeSort of all flat positions with a
//              comparator ordering by line, then value (NaN largest), then
//              position: every line sorted at once, ties in index order.
//
// f16 and bf16 are read as float and written with one rounding: norms and
// scans accumulate in double (as for f32), attention computes in float.

#include <cub/block/block_scan.cuh>
#include <cub/device/device_merge_sort.cuh>

#include "backends/cuda/device_util.cuh"

namespace switchyard::backends::cuda::kern {
namespace {

// --- block reduction in double -------------------------------------------------

__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = block_threads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();  // sh is reused by the next call
  return r;
}

// --- norms --------------------------------------------------------------------

// Rows of `size` contiguous elements (layer/rms: a row; group: a group of
// per_group channels x spatial). Parameters are indexed by the element's
// position in the row (layer/rms) or by its channel (group: groups > 0).
template <class T>
__global__ void norm_rows_kernel(const T* x, T* y, const T* w, const T* b, int64_t rows, int64_t size, double eps,
                                 bool rms, int64_t groups, int64_t per_group, int64_t spatial) {
  __shared__ double sh[block_threads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* px = x + row * size;
    T* py = y + row * size;
    double mean = 0;
    if (!rms) {
      double s = 0;
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) s += to_double(px[i]);
      mean = block_sum(s, sh) / static_cast<double>(size);
    }
    double q = 0;
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
      const double d = to_double(px[i]) - mean;
      q += d * d;
    }
    const double inv = 1.0 / sqrt(block_sum(q, sh) / static_cast<double>(size) + eps);
    const int64_t c0 = groups > 0 ? (row % groups) * per_group : 0;
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
      const int64_t p = groups > 0 ? c0 + i / spatial : i;
      double v = (to_double(px[i]) - mean) * inv;
      if (w) v *= to_double(w[p]);
      if (b) v += to_double(b[p]);
      py[i] = convert<double, T>(v);
    }
  }
}

template <class T>
__global__ void batch_norm_kernel(const T* x, T* y, const T* mean, const T* var, const T* w, const T* b, int64_t n,
                                  int64_t channels, int64_t spatial, double eps) {
  SY_GRID_STRIDE(i, n) {
    const int64_t c = (i / spatial) % channels;
    double v = (to_double(x[i]) - to_double(mean[c])) / sqrt(to_double(var[c]) + eps);
    if (w) v *= to_double(w[c]);
    if (b) v += to_double(b[c]);
    y[i] = convert<double, T>(v);
  }
}

// --- attention ---------------------------------------------------------------------

constexpr int attn_warps = 8;
constexpr size_t attn_shared_limit = 48 * 1024;

size_t attn_shared_bytes(size_t elem, int64_t kt, int64_t E, int64_t Ev) {
  return elem * static_cast<size_t>(kt * (E + Ev) + attn_warps * (E + Ev) + attn_warps * kt);
}

// Storage type D; tiles and arithmetic in T = Opmath<D> (float for the
// 16-bit types, so shared memory holds widened values).
template <class D>
__global__ void attention_kernel(const D* q, const D* k, const D* v, const void* mask, int mask_kind,
                                 Layout<1> mask_batch, int64_t ms_l, int64_t ms_s, D* out, int64_t batches, int64_t L,
                                 int64_t S, int64_t E, int64_t Ev, Opmath<D> scale, bool causal, int64_t KT) {
  using T = Opmath<D>;
  extern __shared__ unsigned char smem_raw[];
  T* ktile = reinterpret_cast<T*>(smem_raw);
  T* vtile = ktile + KT * E;
  T* qrows = vtile + KT * Ev;
  T* accs = qrows + attn_warps * E;
  T* probs = accs + attn_warps * Ev;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t q_blocks = (L + attn_warps - 1) / attn_warps;
  T* qrow = qrows + warp * E;
  T* acc = accs + warp * Ev;
  T* p = probs + warp * KT;
  const T neg_inf = -infinity<T>();
  for (int64_t task = blockIdx.x; task < batches * q_blocks; task += gridDim.x) {
    const int64_t bt = task / q_blocks;
    const int64_t i0 = (task % q_blocks) * attn_warps;
    const int64_t i = i0 + warp;
    const bool active = i < L;
    int64_t moff[1] = {0};
    if (mask_kind != 0) offsets(mask_batch, bt, moff);
    if (active) {
      for (int64_t e = lane; e < E; e += 32) qrow[e] = widen(q[(bt * L + i) * E + e]);
      for (int64_t e = lane; e < Ev; e += 32) acc[e] = T(0);
    }
    T m = neg_inf, l = T(0);
    const int64_t last_row = i0 + attn_warps - 1 < L - 1 ? i0 + attn_warps - 1 : L - 1;
    const int64_t s_end = causal ? (S < last_row + 1 ? S : last_row + 1) : S;
    for (int64_t j0 = 0; j0 < s_end; j0 += KT) {
      const int64_t kt = s_end - j0 < KT ? s_end - j0 : KT;
      __syncthreads();  // the previous tile is no longer read
      for (int64_t t = threadIdx.x; t < kt * E; t += blockDim.x) ktile[t] = widen(k[(bt * S + j0) * E + t]);
      for (int64_t t = threadIdx.x; t < kt * Ev; t += blockDim.x) vtile[t] = widen(v[(bt * S + j0) * Ev + t]);
      __syncthreads();
      if (!active) continue;
      T tmax = neg_inf;
      for (int64_t j = lane; j < kt; j += 32) {
        T s = T(0);
        for (int64_t e = 0; e < E; ++e) s += qrow[e] * ktile[j * E + e];
        s *= scale;
        const int64_t key = j0 + j;
        if (causal && key > i) s = neg_inf;
        if (mask_kind == 1) {
          if (static_cast<const uint8_t*>(mask)[moff[0] + i * ms_l + key * ms_s] == 0) s = neg_inf;
        } else if (mask_kind == 2) {
          s += widen(static_cast<const D*>(mask)[moff[0] + i * ms_l + key * ms_s]);
        }
        p[j] = s;
        tmax = s > tmax ? s : tmax;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const T other = __shfl_xor_sync(0xffffffffu, tmax, o);
        tmax = other > tmax ? other : tmax;
      }
      const T mnew = tmax > m ? tmax : m;
      __syncwarp();
      if (mnew == neg_inf) continue;  // every key so far masked
      const T corr = exp(m - mnew);   // 0 while nothing was kept
      T sum = T(0);
      for (int64_t j = lane; j < kt; j += 32) {
        const T e = exp(p[j] - mnew);
        p[j] = e;
        sum += e;
      }
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l = l * corr + sum;
      m = mnew;
      __syncwarp();
      for (int64_t e = lane; e < Ev; e += 32) {
        T a = acc[e] * corr;
        for (int64_t j = 0; j < kt; ++j) a += p[j] * vtile[j * Ev + e];
        acc[e] = a;
      }
      __syncwarp();
    }
    if (active) {
      // Every key masked: NaN, as the softmax of only -inf.
      const T inv = l > T(0) ? T(1) / l : quiet_nan<T>();
      for (int64_t e = lane; e < Ev; e += 32) out[(bt * L + i) * Ev + e] = convert<T, D>(acc[e] * inv);
    }
  }
}

// --- scans -------------------------------------------------------------------------

template <class O>
using ScanAcc = std::conditional_t<is_float_v<O>, double, unsigned long long>;

struct ScanOpFn {
  bool prod;
  template <class A>
  __device__ A operator()(const A& a, const A& b) const {
    return prod ? static_cast<A>(a * b) : static_cast<A>(a + b);
  }
};

template <class O>
__global__ void scan_kernel(const O* x, O* y, int64_t lines, int64_t len, int64_t inner, bool prod) {
  using A = ScanAcc<O>;
  using BlockScan = cub::BlockScan<A, block_threads>;
  __shared__ typename BlockScan::TempStorage temp;
  const ScanOpFn op{prod};
  for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
    const int64_t base = (line / inner) * len * inner + line % inner;
    A carry = prod ? A(1) : A(0);
    for (int64_t c0 = 0; c0 < len; c0 += block_threads) {
      const int64_t i = c0 + threadIdx.x;
      A v = prod ? A(1) : A(0);
      if (i < len) {
        if constexpr (is_float_v<O>)
          v = to_double(x[base + i * inner]);
        else
          v = static_cast<A>(static_cast<int64_t>(x[base + i * inner]));
      }
      A incl, total;
      BlockScan(temp).InclusiveScan(v, incl, op, total);
      __syncthreads();  // temp is reused by the next chunk
      incl = op(carry, incl);
      if (i < len) {
        if constexpr (is_float_v<O>)
          y[base + i * inner] = convert<double, O>(incl);
        else
          y[base + i * inner] = static_cast<O>(static_cast<int64_t>(incl));
      }
      carry = op(carry, total);
    }
  }
}

// --- sort / topk ---------------------------------------------------------------------

template <class V>
struct LineOrder {
  const V* x;
  int64_t len, inner;
  bool desc;
  __device__ bool smaller(V a, V b) const {
    if constexpr (std::is_floating_point_v<V>) {
      if (isnan(a)) return false;
      if (isnan(b)) return true;
    }
    return a < b;
  }
  __device__ bool operator()(const int64_t& a, const int64_t& b) const {
    const int64_t la = (a / (len * inner)) * inner + a % inner;
    const int64_t lb = (b / (len * inner)) * inner + b % inner;
    if (la != lb) return la < lb;
    const V va = x[a], vb = x[b];
    if (desc ? smaller(vb, va) : smaller(va, vb)) return true;
    if (desc ? smaller(va, vb) : smaller(vb, va)) return false;
    return a < b;  // same line: flat order is position order
  }
};

__global__ void iota_kernel(int64_t* keys, int64_t n) { SY_GRID_STRIDE(i, n) keys[i] = i; }

// out[o][r][c] = position on its line of the r-th element of line (o, c).
__global__ void ranks_kernel(const int64_t* sorted, int64_t* out, int64_t lines, int64_t len, int64_t inner,
                             int64_t keep) {
  SY_GRID_STRIDE(t, lines * keep) {
    const int64_t line = t / keep, r = t % keep;
    const int64_t o = line / inner, c = line % inner;
    out[(o * keep + r) * inner + c] = (sorted[line * len + r] / inner) % len;
  }
}

template <class V>
cudaError_t merge_sort(Launch l, const V* values, int64_t n, int64_t len, int64_t inner, bool desc, void* scratch,
                       size_t* scratch_bytes) {
  int64_t* keys = static_cast<int64_t*>(scratch);
  LineOrder<V> order{values, len, inner, desc};
  size_t temp = 0;
  cudaError_t e = cub::DeviceMergeSort::StableSortKeys(nullptr, temp, keys, n, order, l.stream);
  if (e != cudaSuccess) return e;
  const size_t need = static_cast<size_t>(n) * sizeof(int64_t) + temp + 256;
  if (scratch == nullptr) {
    *scratch_bytes = need;
    return cudaSuccess;
  }
  if (*scratch_bytes < need) return cudaErrorInvalidValue;
  if ((e = launch(l, n, iota_kernel, keys, n)) != cudaSuccess) return e;
  void* temp_ptr = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(keys + n) + 255) / 256 * 256);
  return cub::DeviceMergeSort::StableSortKeys(temp_ptr, temp, keys, n, order, l.stream);
}

// --- scatter kinds ---------------------------------------------------------------------

// One thread per column of the index (all its coordinates but the axis),
// walking the axis in order: columns write disjoint output elements, so
// the result is deterministic and "the last in index order wins" holds.
// Sums and products of f16/bf16 compute in float and round at every step,
// as the CPU's Half arithmetic does; amax/amin pick one of the two stored
// values (bits unchanged).
template <class T>
__device__ T scatter_combine(int kind, T cur, T in) {
  using C = Opmath<T>;
  switch (kind) {
    case scatter_assign:
      return in;
    case scatter_sum:
      if constexpr (std::is_same_v<T, bool>)
        return cur || in;
      else if constexpr (is_half16_v<T>)
        return convert<C, T>(widen(cur) + widen(in));
      else
        return static_cast<T>(static_cast<Wide<T>>(cur) + static_cast<Wide<T>>(in));
    case scatter_prod:
      if constexpr (std::is_same_v<T, bool>)
        return cur && in;
      else if constexpr (is_half16_v<T>)
        return convert<C, T>(widen(cur) * widen(in));
      else
        return static_cast<T>(static_cast<Wide<T>>(cur) * static_cast<Wide<T>>(in));
    default: {  // amax, amin: NaN propagates (PyTorch)
      const C c = widen(cur), x = widen(in);
      if constexpr (is_float_v<T>)
        if (isnan(x) || isnan(c)) return isnan(x) ? in : cur;
      const bool mx = kind == scatter_amax;
      return (mx ? x > c : x < c) ? in : cur;
    }
  }
}

template <class T, class I>
__global__ void scatter_lines_kernel(int kind, const T* src, const I* index, T* out, Layout<3> columns, int64_t ncols,
                                     int64_t m, int64_t out_axis_stride, int64_t src_axis_stride,
                                     int64_t index_axis_stride, int64_t axis_len) {
  SY_GRID_STRIDE(c, ncols) {
    int64_t off[3];
    offsets(columns, c, off);
    for (int64_t j = 0; j < m; ++j) {
      int64_t v = static_cast<int64_t>(index[off[2] + j * index_axis_stride]);
      if (v < -axis_len || v >= axis_len) continue;  // check_indices reports it
      if (v < 0) v += axis_len;
      T* o = out + off[0] + v * out_axis_stride;
      *o = scatter_combine<T>(kind, *o, src[off[1] + j * src_axis_stride]);
    }
  }
}

}  // namespace

cudaError_t scatter_lines(Launch l, int kind, DType t, DType index_t, const void* src, const void* index, void* out,
                          const Layout<3>& columns, int64_t ncols, int64_t m, int64_t out_axis_stride,
                          int64_t src_axis_stride, int64_t index_axis_stride, int64_t axis_len) {
  if (index_t != DType::i64 && index_t != DType::i32) return cudaErrorInvalidValue;
  return by_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if (index_t == DType::i64)
      return launch(l, ncols, scatter_lines_kernel<T, int64_t>, kind, static_cast<const T*>(src),
                    static_cast<const int64_t*>(index), static_cast<T*>(out), columns, ncols, m, out_axis_stride,
                    src_axis_stride, index_axis_stride, axis_len);
    return launch(l, ncols, scatter_lines_kernel<T, int32_t>, kind, static_cast<const T*>(src),
                  static_cast<const int32_t*>(index), static_cast<T*>(out), columns, ncols, m, out_axis_stride,
                  src_axis_stride, index_axis_stride, axis_len);
  });
}

cudaError_t norm_rows(Launch l, DType t, const void* x, void* y, const void* w, const void* b, int64_t rows,
                      int64_t size, double eps, bool rms, int64_t groups, int64_t per_group, int64_t spatial) {
  if (rows <= 0 || size <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(rows < l.max_blocks ? rows : l.max_blocks);
  return by_float_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    norm_rows_kernel<T><<<grid, block_threads, 0, l.stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                              static_cast<const T*>(w), static_cast<const T*>(b), rows,
                                                              size, eps, rms, groups, per_group, spatial);
    return cudaGetLastError();
  });
}

cudaError_t batch_norm(Launch l, DType t, const void* x, void* y, const void* mean, const void* var, const void* w,
                       const void* b, int64_t n, int64_t channels, int64_t spatial, double eps) {
  return by_float_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    return launch(l, n, batch_norm_kernel<T>, static_cast<const T*>(x), static_cast<T*>(y), static_cast<const T*>(mean),
                  static_cast<const T*>(var), static_cast<const T*>(w), static_cast<const T*>(b), n, channels, spatial,
                  eps);
  });
}

cudaError_t attention(Launch l, DType t, const void* q, const void* k, const void* v, const void* mask, int mask_kind,
                      const Layout<1>& mask_batch, int64_t ms_l, int64_t ms_s, void* out, int64_t batches, int64_t L,
                      int64_t S, int64_t E, int64_t Ev, double scale, bool causal) {
  if (batches <= 0 || L <= 0) return cudaSuccess;
  return by_float_dtype(t, [&](auto tag) {
    using D = decltype(tag);
    using T = Opmath<D>;  // what the shared tiles hold
    int64_t kt = 64;
    while (kt > 1 && attn_shared_bytes(sizeof(T), kt, E, Ev) > attn_shared_limit) kt /= 2;
    const size_t shared = attn_shared_bytes(sizeof(T), kt, E, Ev);
    if (shared > attn_shared_limit) return cudaErrorNotSupported;  // head dims beyond a few thousand
    const int64_t tasks = batches * ((L + attn_warps - 1) / attn_warps);
    const unsigned grid = static_cast<unsigned>(tasks < l.max_blocks ? tasks : l.max_blocks);
    const unsigned threads = attn_warps * 32;
    attention_kernel<D><<<grid, threads, shared, l.stream>>>(
        static_cast<const D*>(q), static_cast<const D*>(k), static_cast<const D*>(v), mask, mask_kind, mask_batch, ms_l,
        ms_s, static_cast<D*>(out), batches, L, S, E, Ev, static_cast<T>(scale), causal, kt);
    return cudaGetLastError();
  });
}

cudaError_t scan(Launch l, DType t, const void* x, void* y, int64_t lines, int64_t len, int64_t inner, bool prod) {
  if (lines <= 0 || len <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(lines < l.max_blocks ? lines : l.max_blocks);
  return by_dtype(t, [&](auto tag) -> cudaError_t {
    using O = decltype(tag);
    if constexpr (std::is_same_v<O, bool>) {
      return cudaErrorNotSupported;  // the rules scan bools as i64
    } else {
      scan_kernel<O>
          <<<grid, block_threads, 0, l.stream>>>(static_cast<const O*>(x), static_cast<O*>(y), lines, len, inner, prod);
      return cudaGetLastError();
    }
  });
}

cudaError_t sort_positions(Launch l, DType key_t, const void* values, int64_t n, int64_t len, int64_t inner,
                           bool descending, void* scratch, size_t* scratch_bytes) {
  if (key_t == DType::f64)
    return merge_sort(l, static_cast<const double*>(values), n, len, inner, descending, scratch, scratch_bytes);
  if (key_t == DType::i64)
    return merge_sort(l, static_cast<const int64_t*>(values), n, len, inner, descending, scratch, scratch_bytes);
  return cudaErrorNotSupported;
}

cudaError_t sort_ranks(Launch l, const void* scratch, int64_t* out, int64_t lines, int64_t len, int64_t inner,
                       int64_t keep) {
  return launch(l, lines * keep, ranks_kernel, static_cast<const int64_t*>(scratch), out, lines, len, inner, keep);
}

}  // namespace switchyard::backends::cuda::kern
