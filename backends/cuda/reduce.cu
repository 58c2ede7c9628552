// SPDX-License-Identifier: Apache-2.0
// Reductions over any axis set (one group of threads per output element)
// and (log_)softmax along one axis (one group per row). A group is a warp
// for short reductions and the whole block for long ones, so neither case
// leaves most threads idle.
//
// f16 and bf16 load as float and accumulate as the f32 kernels do (in
// double, as the CPU backend's f32 kernels), then round once: to float and
// from there to the 16-bit type, the CPU's "f32 result, rounded once".

#include <cstring>

#include "backends/cuda/device_util.cuh"

namespace switchyard::backends::cuda::kern {
namespace {

template <class T>
inline constexpr bool is_f = is_float_v<T>;

// Tree reduction over the G threads of each group; every lane gets the result.
template <class Acc, class Op>
__device__ inline Acc group_reduce(Acc v, Acc* sh, int G, const Op& op) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % G;
  sh[tid] = v;
  __syncthreads();
  for (int s = G / 2; s > 0; s >>= 1) {
    if (lane < s) sh[tid] = op.combine(sh[tid], sh[tid + s]);
    __syncthreads();
  }
  Acc r = sh[tid - lane];
  __syncthreads();  // the caller may reuse sh right away
  return r;
}

int group_size(int64_t count) { return count >= 512 ? block_threads : 32; }

struct AddD {
  __device__ double combine(double a, double b) const { return a + b; }
};
struct MaxD {
  __device__ double combine(double a, double b) const { return a < b ? b : a; }
};

// sum, mean and prod: double accumulation for floats, wrapping 64-bit
// integers otherwise (as the CPU backend, which accumulates in int64).
template <class T, class R, bool Prod, bool Mean>
struct Accumulate {
  using Acc = std::conditional_t<is_f<T>, double, uint64_t>;
  using Out = R;
  __device__ Acc identity() const { return Prod ? Acc(1) : Acc(0); }
  __device__ Acc load(T v, int64_t) const {
    if constexpr (is_f<T>)
      return to_double(v);
    else
      return static_cast<uint64_t>(static_cast<int64_t>(v));
  }
  __device__ Acc combine(Acc a, Acc b) const { return Prod ? static_cast<Acc>(a * b) : static_cast<Acc>(a + b); }
  __device__ R finish(Acc a, int64_t count) const {
    if constexpr (Mean)
      return convert<double, R>(static_cast<double>(a) / static_cast<double>(count));
    else if constexpr (is_f<T>)
      return convert<double, R>(a);
    else
      return static_cast<R>(static_cast<int64_t>(a));
  }
};

template <class T>
struct Valued {
  T v;
  int64_t i;  // -1: no element yet
};

// max/min propagate NaN; argmax/argmin give the first NaN, else the first
// extreme element (lowest index on ties), like the CPU backend. Values are
// kept in their storage type and compared in the compute type.
template <class T, bool Max, bool Arg>
struct Extreme {
  using Acc = Valued<T>;
  using Out = std::conditional_t<Arg, int64_t, T>;
  __device__ Acc identity() const { return Acc{T{}, -1}; }
  __device__ Acc load(T v, int64_t j) const { return Acc{v, j}; }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const Acc& first = a.i <= b.i ? a : b;
    const Opmath<T> av = widen(a.v), bv = widen(b.v);
    if constexpr (is_f<T>) {
      const bool an = isnan(av), bn = isnan(bv);
      if (an && bn) return first;
      if (an) return a;
      if (bn) return b;
    }
    if (Max ? av > bv : av < bv) return a;
    if (Max ? bv > av : bv < av) return b;
    return first;
  }
  __device__ Out finish(Acc a, int64_t) const {
    if constexpr (Arg)
      return a.i < 0 ? 0 : a.i;
    else  // through the compute type: a 16-bit NaN leaves as the CPU's quiet NaN
      return convert<Opmath<T>, T>(widen(a.v));
  }
};

template <class T, bool Any>
struct Logical {
  using Acc = bool;
  using Out = bool;
  __device__ bool identity() const { return !Any; }
  __device__ bool load(T v, int64_t) const { return widen(v) != Opmath<T>(0); }
  __device__ bool combine(bool a, bool b) const { return Any ? (a || b) : (a && b); }
  __device__ bool finish(bool a, int64_t) const { return a; }
};

template <class T, class Op>
__global__ void reduce_kernel(const T* in, typename Op::Out* out, Layout<1> kept, int64_t n_out, Layout<1> red,
                              int64_t count, int G, Op op) {
  __shared__ typename Op::Acc sh[block_threads];
  const int gpb = block_threads / G;
  const int g = static_cast<int>(threadIdx.x) / G, lane = static_cast<int>(threadIdx.x) % G;
  // ob is uniform across the block, so every thread reaches the barriers.
  for (int64_t ob = static_cast<int64_t>(blockIdx.x) * gpb; ob < n_out; ob += static_cast<int64_t>(gridDim.x) * gpb) {
    const int64_t o = ob + g;
    auto acc = op.identity();
    if (o < n_out) {
      int64_t base[1];
      offsets(kept, o, base);
      for (int64_t j = lane; j < count; j += G) {
        int64_t r[1];
        offsets(red, j, r);
        acc = op.combine(acc, op.load(in[base[0] + r[0]], j));
      }
    }
    acc = group_reduce(acc, sh, G, op);
    if (o < n_out && lane == 0) out[o] = op.finish(acc, count);
  }
}

// --- split reductions: few outputs, long reductions ----------------------------
// One block per output leaves a 132-SM GPU nearly idle on x.sum(): such
// reductions split each output over `splits` blocks that write partial
// accumulators, and a second kernel combines the partials of each output.

// A warp shuffle of any trivially copyable accumulator of up to 16 bytes.
template <class Acc>
__device__ inline Acc shfl_down(Acc v, int delta) {
  constexpr int words = (sizeof(Acc) + 7) / 8;
  unsigned long long w[words] = {};
  memcpy(w, &v, sizeof(Acc));
  for (int k = 0; k < words; ++k) w[k] = __shfl_down_sync(0xffffffffu, w[k], delta);
  Acc r;
  memcpy(&r, w, sizeof(Acc));
  return r;
}

// Whole-block reduction with warp shuffles, then one warp over the warps'
// results. Every thread calls it; thread 0 holds the result.
template <class Acc, class Op>
__device__ inline Acc block_reduce(Acc v, const Op& op) {
  __shared__ __align__(16) unsigned char raw[32 * sizeof(Acc)];
  Acc* per_warp = reinterpret_cast<Acc*>(raw);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  for (int d = 16; d > 0; d >>= 1) v = op.combine(v, shfl_down(v, d));
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x) / 32;
  if (warp == 0) {
    v = lane < warps ? per_warp[lane] : op.identity();
    for (int d = 16; d > 0; d >>= 1) v = op.combine(v, shfl_down(v, d));
  }
  __syncthreads();  // per_warp is reused by the next call
  return v;
}

template <class T, class Op>
__global__ void reduce_split_kernel(const T* in, typename Op::Acc* partial, Layout<1> kept, int64_t n_out,
                                    Layout<1> red, int64_t count, int64_t chunk, int splits, Op op) {
  const bool contiguous = red.rank == 1 && red.strides[0][0] == 1;
  // b is uniform across the block, so every thread reaches the barriers.
  for (int64_t b = blockIdx.x; b < n_out * splits; b += gridDim.x) {
    const int64_t o = b / splits, part = b % splits;
    int64_t base[1];
    offsets(kept, o, base);
    const int64_t begin = part * chunk, end = begin + chunk < count ? begin + chunk : count;
    auto acc = op.identity();
    if (contiguous) {
      const T* p = in + base[0];
      for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) acc = op.combine(acc, op.load(p[j], j));
    } else {
      for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
        int64_t r[1];
        offsets(red, j, r);
        acc = op.combine(acc, op.load(in[base[0] + r[0]], j));
      }
    }
    acc = block_reduce(acc, op);
    if (threadIdx.x == 0) partial[b] = acc;
  }
}

template <class Op>
__global__ void reduce_partials_kernel(const typename Op::Acc* partial, typename Op::Out* out, int64_t n_out,
                                       int splits, int64_t count, Op op) {
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    auto acc = op.identity();
    for (int s = static_cast<int>(threadIdx.x); s < splits; s += static_cast<int>(blockDim.x))
      acc = op.combine(acc, partial[o * splits + s]);
    acc = block_reduce(acc, op);
    if (threadIdx.x == 0) out[o] = op.finish(acc, count);
  }
}

// Column reductions (the kept axes are the innermost, contiguous ones, as in
// x.sum(0) of a row-major matrix): one thread per output, so neighbouring
// threads read neighbouring addresses, and blockIdx.y splits the reduced
// range when there are too few outputs to fill the device.
template <class T, class Op>
__global__ void reduce_columns_kernel(const T* in, typename Op::Acc* partial, typename Op::Out* out, int64_t n_out,
                                      Layout<1> red, int64_t count, int64_t chunk, int splits, Op op) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= n_out) return;
  const int64_t part = blockIdx.y;
  const int64_t begin = part * chunk, end = begin + chunk < count ? begin + chunk : count;
  auto acc = op.identity();
  for (int64_t j = begin; j < end; ++j) {
    int64_t r[1];
    offsets(red, j, r);
    acc = op.combine(acc, op.load(in[o + r[0]], j));
  }
  if (splits == 1)
    out[o] = op.finish(acc, count);
  else
    partial[o * splits + part] = acc;
}

// Whether a reduction is a column reduction: the outputs are contiguous in
// the input (kept layout merged to one axis of stride 1), and enough of them
// for whole warps.
bool columns(const Layout<1>& kept, int64_t n_out) { return n_out >= 64 && kept.rank == 1 && kept.strides[0][0] == 1; }

// Splits of the reduced range for a column reduction: enough threads to
// fill an H100/H200-class device (~270k), chunks of at least 64 elements.
int column_splits(int64_t n_out, int64_t count) {
  constexpr int64_t threads_wanted = 1 << 18;
  int64_t s = (threads_wanted + n_out - 1) / n_out;
  if (s > count / 64) s = count / 64;
  if (s > 65535) s = 65535;
  return static_cast<int>(s < 1 ? 1 : s);
}

// Splits per output: 1 (the group kernel) when there are enough outputs to
// fill the device or the reduction is short.
int reduce_splits(const Launch& l, int64_t n_out, int64_t count) {
  if (n_out <= 0 || count < 32768 || n_out * 4 >= l.max_blocks) return 1;
  int64_t s = l.max_blocks / n_out;
  if (s > count / 8192) s = count / 8192;
  return static_cast<int>(s < 1 ? 1 : s);
}

template <class T>
__global__ void var_kernel(const T* in, T* out, Layout<1> kept, int64_t n_out, Layout<1> red, int64_t count, int G,
                           int64_t correction, bool sd) {
  __shared__ double sh[block_threads];
  const int gpb = block_threads / G;
  const int g = static_cast<int>(threadIdx.x) / G, lane = static_cast<int>(threadIdx.x) % G;
  for (int64_t ob = static_cast<int64_t>(blockIdx.x) * gpb; ob < n_out; ob += static_cast<int64_t>(gridDim.x) * gpb) {
    const int64_t o = ob + g;
    int64_t base[1] = {0};
    if (o < n_out) offsets(kept, o, base);
    double s = 0;
    if (o < n_out)
      for (int64_t j = lane; j < count; j += G) {
        int64_t r[1];
        offsets(red, j, r);
        s += to_double(in[base[0] + r[0]]);
      }
    const double mean = group_reduce(s, sh, G, AddD{}) / static_cast<double>(count);
    double q = 0;
    if (o < n_out)
      for (int64_t j = lane; j < count; j += G) {
        int64_t r[1];
        offsets(red, j, r);
        const double d = to_double(in[base[0] + r[0]]) - mean;
        q += d * d;
      }
    const double sq = group_reduce(q, sh, G, AddD{});
    if (o < n_out && lane == 0) {
      const double denom = static_cast<double>(count - correction);
      const double var = sq / fmax(0.0, denom);  // PyTorch: inf for n <= correction unless 0 / 0
      out[o] = convert<double, T>(sd ? sqrt(var) : var);
    }
  }
}

// Storage S, computed in T = Opmath<S> (float for f16/bf16, as the CPU's
// f32 kernel), one rounding per output element.
template <class S>
__global__ void softmax_kernel(const S* x, S* y, int64_t rows, int64_t len, int64_t inner, bool log_out, int G) {
  using T = Opmath<S>;
  __shared__ double sh[block_threads];
  const int gpb = block_threads / G;
  const int g = static_cast<int>(threadIdx.x) / G, lane = static_cast<int>(threadIdx.x) % G;
  for (int64_t rb = static_cast<int64_t>(blockIdx.x) * gpb; rb < rows; rb += static_cast<int64_t>(gridDim.x) * gpb) {
    const int64_t r = rb + g;
    const bool active = r < rows;
    const int64_t base = active ? (r / inner) * len * inner + r % inner : 0;
    T mx = -infinity<T>();
    if (active)
      for (int64_t i = lane; i < len; i += G) {
        const T v = widen(x[base + i * inner]);
        mx = mx < v ? v : mx;  // std::max's rule: NaN never wins
      }
    T m = static_cast<T>(group_reduce(static_cast<double>(mx), sh, G, MaxD{}));
    if (isinf(m) && m < T(0)) m = T(0);  // all -inf: avoid inf - inf
    double s = 0;
    if (active)
      for (int64_t i = lane; i < len; i += G) s += exp(static_cast<double>(widen(x[base + i * inner]) - m));
    const double sum = group_reduce(s, sh, G, AddD{});
    if (!active) continue;
    if (log_out) {
      const T lse = static_cast<T>(log(sum));
      for (int64_t i = lane; i < len; i += G) y[base + i * inner] = convert<T, S>(widen(x[base + i * inner]) - m - lse);
    } else {
      const double inv = 1.0 / sum;
      for (int64_t i = lane; i < len; i += G)
        y[base + i * inner] = convert<double, S>(exp(static_cast<double>(widen(x[base + i * inner]) - m)) * inv);
    }
  }
}

unsigned groups_grid(const Launch& l, int64_t groups, int G) {
  const int64_t per = block_threads / G;
  const int64_t blocks = (groups + per - 1) / per;
  return static_cast<unsigned>(blocks < l.max_blocks ? blocks : l.max_blocks);
}

template <class T, class Op>
cudaError_t run_reduce(const Launch& l, const void* in, void* out, const Layout<1>& kept, int64_t n_out,
                       const Layout<1>& red, int64_t count, void* scratch, size_t scratch_bytes) {
  if (n_out <= 0) return cudaSuccess;
  using Acc = typename Op::Acc;
  static_assert(sizeof(Acc) <= reduce_partial_bytes, "a partial accumulator must fit its scratch slot");
  if (columns(kept, n_out)) {
    int splits = column_splits(n_out, count);
    if (splits > 1 && !(scratch && scratch_bytes >= static_cast<size_t>(n_out) * splits * sizeof(Acc))) splits = 1;
    const int64_t chunk = (count + splits - 1) / splits;
    const dim3 grid(static_cast<unsigned>((n_out + block_threads - 1) / block_threads), static_cast<unsigned>(splits));
    auto* partial = static_cast<Acc*>(scratch);
    auto* result = static_cast<typename Op::Out*>(out);
    reduce_columns_kernel<T, Op><<<grid, block_threads, 0, l.stream>>>(static_cast<const T*>(in), partial, result,
                                                                       n_out, red, count, chunk, splits, Op{});
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess || splits == 1) return e;
    const int64_t out_blocks = n_out < l.max_blocks ? n_out : l.max_blocks;
    reduce_partials_kernel<Op><<<static_cast<unsigned>(out_blocks), block_threads, 0, l.stream>>>(
        partial, result, n_out, splits, count, Op{});
    return cudaGetLastError();
  }
  const int splits = reduce_splits(l, n_out, count);
  if (splits > 1 && scratch && scratch_bytes >= static_cast<size_t>(n_out) * splits * sizeof(Acc)) {
    const int64_t chunk = (count + splits - 1) / splits;
    const int64_t blocks = n_out * splits;
    auto* partial = static_cast<Acc*>(scratch);
    reduce_split_kernel<T, Op><<<static_cast<unsigned>(blocks), block_threads, 0, l.stream>>>(
        static_cast<const T*>(in), partial, kept, n_out, red, count, chunk, splits, Op{});
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    const int64_t out_blocks = n_out < l.max_blocks ? n_out : l.max_blocks;
    reduce_partials_kernel<Op><<<static_cast<unsigned>(out_blocks), block_threads, 0, l.stream>>>(
        partial, static_cast<typename Op::Out*>(out), n_out, splits, count, Op{});
    return cudaGetLastError();
  }
  const int G = group_size(count);
  reduce_kernel<T, Op><<<groups_grid(l, n_out, G), block_threads, 0, l.stream>>>(
      static_cast<const T*>(in), static_cast<typename Op::Out*>(out), kept, n_out, red, count, G, Op{});
  return cudaGetLastError();
}

}  // namespace

size_t reduce_scratch_bytes(Launch l, const Layout<1>& kept, int64_t n_out, int64_t count) {
  const int splits = columns(kept, n_out) ? column_splits(n_out, count) : reduce_splits(l, n_out, count);
  return splits > 1 ? static_cast<size_t>(n_out) * static_cast<size_t>(splits) * reduce_partial_bytes : 0;
}

cudaError_t reduce(Launch l, int kind, DType in_t, DType /*out_t: implied by kind and in_t*/, const void* in, void* out,
                   const Layout<1>& kept, int64_t n_out, const Layout<1>& red, int64_t count, int64_t correction,
                   void* scratch, size_t scratch_bytes) {
  return by_dtype(in_t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    using SumR = std::conditional_t<is_f<T>, T, int64_t>;
    switch (kind) {
      case r_sum:
        return run_reduce<T, Accumulate<T, SumR, false, false>>(l, in, out, kept, n_out, red, count, scratch,
                                                                scratch_bytes);
      case r_prod:
        return run_reduce<T, Accumulate<T, SumR, true, false>>(l, in, out, kept, n_out, red, count, scratch,
                                                               scratch_bytes);
      case r_mean:
        if constexpr (is_f<T>)
          return run_reduce<T, Accumulate<T, T, false, true>>(l, in, out, kept, n_out, red, count, scratch,
                                                              scratch_bytes);
        else
          return cudaErrorNotSupported;
      case r_max:
        return run_reduce<T, Extreme<T, true, false>>(l, in, out, kept, n_out, red, count, scratch, scratch_bytes);
      case r_min:
        return run_reduce<T, Extreme<T, false, false>>(l, in, out, kept, n_out, red, count, scratch, scratch_bytes);
      case r_argmax:
        return run_reduce<T, Extreme<T, true, true>>(l, in, out, kept, n_out, red, count, scratch, scratch_bytes);
      case r_argmin:
        return run_reduce<T, Extreme<T, false, true>>(l, in, out, kept, n_out, red, count, scratch, scratch_bytes);
      case r_any:
        return run_reduce<T, Logical<T, true>>(l, in, out, kept, n_out, red, count, scratch, scratch_bytes);
      case r_all:
        return run_reduce<T, Logical<T, false>>(l, in, out, kept, n_out, red, count, scratch, scratch_bytes);
      case r_var:
      case r_std:
        if constexpr (is_f<T>) {
          if (n_out <= 0) return cudaSuccess;
          const int G = group_size(count);
          var_kernel<T><<<groups_grid(l, n_out, G), block_threads, 0, l.stream>>>(
              static_cast<const T*>(in), static_cast<T*>(out), kept, n_out, red, count, G, correction, kind == r_std);
          return cudaGetLastError();
        } else {
          return cudaErrorNotSupported;
        }
      default:
        return cudaErrorNotSupported;
    }
  });
}

cudaError_t softmax(Launch l, DType t, const void* in, void* out, int64_t outer, int64_t len, int64_t inner, bool log) {
  const int64_t rows = outer * inner;
  if (rows <= 0 || len <= 0) return cudaSuccess;
  const int G = group_size(len);
  return by_float_dtype(t, [&](auto tag) -> cudaError_t {
    using S = decltype(tag);
    softmax_kernel<S><<<groups_grid(l, rows, G), block_threads, 0, l.stream>>>(
        static_cast<const S*>(in), static_cast<S*>(out), rows, len, inner, log, G);
    return cudaGetLastError();
  });
}

}  // namespace switchyard::backends::cuda::kern
