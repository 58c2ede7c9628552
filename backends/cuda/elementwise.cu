// SPDX-License-Identifier: Apache-2.0
// Cast, unary, binary/scalar and where kernels. One kernel template per
// family; the element operation is a template parameter (K), and the
// dtype x kind combinations the op rules forbid are never instantiated
// (the `valid` tables below mirror backends/cpu/elementwise.cpp).
//
// Kernels are templates over the storage type S and compute in Opmath<S>
// (element.hpp): f16 and bf16 load as float, compute in float and round
// once on the store, as the CPU backend does; every other type computes
// in itself.

#include <cmath>
#include <cstring>
#include <limits>

#include "backends/common/number_conversion.hpp"
#include "backends/cuda/device_util.cuh"

namespace switchyard::backends::cuda::kern {
namespace {

using backends::clamp_bound;

template <class T>
inline constexpr bool is_f = std::is_floating_point_v<T>;
template <class T>
inline constexpr bool is_b = std::is_same_v<T, bool>;

// --- cast -------------------------------------------------------------

template <class S, class D>
__global__ void cast_kernel(const S* src, D* dst, int64_t n) {
  SY_GRID_STRIDE(i, n) dst[i] = convert<S, D>(src[i]);
}

// --- unary ------------------------------------------------------------

constexpr bool unary_predicate(int k) { return k == u_logical_not || k == u_isnan || k == u_isinf; }

template <class T>
constexpr bool unary_valid(int k) {
  switch (k) {
    case u_neg:
    case u_relu:
    case u_floor:
    case u_ceil:
    case u_round:
    case u_clamp:
      return !is_b<T>;
    case u_abs:
    case u_sign:  // bool: the identity, as on the CPU
    case u_logical_not:
    case u_isnan:
    case u_isinf:
      return true;
    case u_bitwise_not:
      return !is_f<T>;
    default:  // the floating family: the rules compute it in a float type
      return is_f<T>;
  }
}

template <class T, int K>
struct UnaryFn {
  using R = std::conditional_t<unary_predicate(K), bool, T>;
  T lo, hi;
  bool has_lo, has_hi;
  __device__ R operator()(T x) const {
    // Floats flip or clear the sign bit (0 - x would keep the sign of a
    // zero, as the CPU's kernels do not); integers wrap.
    if constexpr (K == u_neg) {
      if constexpr (is_f<T>)
        return static_cast<T>(-static_cast<Wide<T>>(x));
      else
        return static_cast<T>(Wide<T>(0) - static_cast<Wide<T>>(x));
    } else if constexpr (K == u_abs) {
      if constexpr (is_b<T> || std::is_unsigned_v<T>)
        return x;
      else if constexpr (is_f<T>)
        return static_cast<T>(fabs(static_cast<Wide<T>>(x)));
      else
        return x < T(0) ? static_cast<T>(Wide<T>(0) - static_cast<Wide<T>>(x)) : x;
    } else if constexpr (K == u_sign) {
      if constexpr (is_b<T>)
        return x;
      else
        return static_cast<T>((T(0) < x) - (x < T(0)));
    } else if constexpr (K == u_relu)
      return x < T(0) ? T(0) : x;  // NaN and -0 stay, as on the CPU and in PyTorch
    else if constexpr (K == u_floor) {
      if constexpr (is_f<T>)
        return floor(x);
      else
        return x;
    } else if constexpr (K == u_ceil) {
      if constexpr (is_f<T>)
        return ceil(x);
      else
        return x;
    } else if constexpr (K == u_round) {
      if constexpr (is_f<T>)
        return nearbyint(x);
      else
        return x;
    } else if constexpr (K == u_clamp) {
      if constexpr (is_f<T>)
        if (isnan(x)) return x;
      if (has_lo && x < lo) x = lo;
      if (has_hi && x > hi) x = hi;
      return x;
    } else if constexpr (K == u_logical_not)
      return x == T(0);
    else if constexpr (K == u_bitwise_not) {
      if constexpr (is_b<T>)
        return !x;
      else
        return static_cast<T>(~x);
    } else if constexpr (K == u_isnan) {
      if constexpr (is_f<T>)
        return isnan(x);
      else
        return false;
    } else if constexpr (K == u_isinf) {
      if constexpr (is_f<T>)
        return isinf(x);
      else
        return false;
    } else if constexpr (is_f<T>) {
      if constexpr (K == u_exp)
        return exp(x);
      else if constexpr (K == u_log)
        return log(x);
      else if constexpr (K == u_log1p)
        return log1p(x);
      else if constexpr (K == u_expm1)
        return expm1(x);
      else if constexpr (K == u_sqrt)
        return sqrt(x);
      else if constexpr (K == u_rsqrt)
        return T(1) / sqrt(x);
      else if constexpr (K == u_sin)
        return sin(x);
      else if constexpr (K == u_cos)
        return cos(x);
      else if constexpr (K == u_tanh)
        return tanh(x);
      else if constexpr (K == u_sigmoid)
        return T(1) / (T(1) + exp(-x));
      else if constexpr (K == u_gelu)
        return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
      else if constexpr (K == u_silu)
        return x / (T(1) + exp(-x));
      else if constexpr (K == u_erf)
        return erf(x);
      else
        return T(1) / x;  // reciprocal
    } else {
      return R{};
    }
  }
};

// The stored result of a unary op on storage type S: bool for predicates.
template <class S, int K>
using UnaryOut = std::conditional_t<unary_predicate(K), bool, S>;

template <class S, int K>
__global__ void unary_kernel(const S* in, UnaryOut<S, K>* out, int64_t n, UnaryFn<Opmath<S>, K> fn) {
  using R = typename UnaryFn<Opmath<S>, K>::R;
  SY_GRID_STRIDE(i, n) out[i] = convert<R, UnaryOut<S, K>>(fn(widen(in[i])));
}

template <class S, int K = 0>
cudaError_t dispatch_unary(const Launch& l, int kind, const S* in, void* out, int64_t n, double a, double b) {
  using T = Opmath<S>;
  if constexpr (K >= u_count) {
    return cudaErrorNotSupported;
  } else {
    if (kind != K) return dispatch_unary<S, K + 1>(l, kind, in, out, n, a, b);
    if constexpr (!unary_valid<T>(K)) {
      return cudaErrorNotSupported;
    } else {
      UnaryFn<T, K> fn{};
      if constexpr (K == u_clamp) {
        fn.has_lo = !std::isnan(a);
        fn.has_hi = !std::isnan(b);
        // Limited to T's range first, as on the CPU: u8 clamp(-1, 2) is [0, 2].
        // A 16-bit float clamps with float bounds, as the CPU's f32 kernel.
        fn.lo = fn.has_lo ? clamp_bound<T>(a) : T(0);
        fn.hi = fn.has_hi ? clamp_bound<T>(b) : T(0);
      }
      return launch(l, n, unary_kernel<S, K>, in, static_cast<UnaryOut<S, K>*>(out), n, fn);
    }
  }
}

// --- binary -----------------------------------------------------------

constexpr bool binary_bool_result(int k) {
  return is_comparison(static_cast<BinaryKind>(k)) || is_logical(static_cast<BinaryKind>(k));
}
// A variable, not a function: device code may read a host constexpr value.
template <int K>
inline constexpr bool int_division = divides(static_cast<BinaryKind>(K));

template <class T>
constexpr bool binary_valid(int k) {
  switch (k) {
    case b_sub:
    case b_pow:
    case b_remainder:
    case b_floor_divide:
      return !is_b<T>;
    case b_div:
    case b_atan2:
      return is_f<T>;
    case b_bitwise_and:
    case b_bitwise_or:
    case b_bitwise_xor:
      return !is_f<T>;
    default:
      return true;
  }
}

template <class T>
__device__ inline T int_pow(T base, T e) {
  if (e < T(0)) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1)) return (e % 2 == 0) ? T(1) : T(-1);
    return T(0);
  }
  Wide<T> result = 1, b = static_cast<Wide<T>>(base);
  while (e > T(0)) {
    if (e & 1) result = static_cast<Wide<T>>(result * b);
    b = static_cast<Wide<T>>(b * b);
    e >>= 1;
  }
  return static_cast<T>(result);
}

template <class T>
__device__ inline T py_remainder(T a, T b) {
  if constexpr (is_f<T>) {
    T r = fmod(a, b);
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
    return r;
  } else {
    if (b == T(0)) return T(0);  // flagged through the status word
    if constexpr (std::is_signed_v<T>)
      if (b == T(-1)) return T(0);  // avoids INT_MIN % -1
    T r = a % b;
    if constexpr (std::is_signed_v<T>)
      if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
    return r;
  }
}

// Python's a // b (see backends/cpu/elementwise.cpp for the float rule).
template <class T>
__device__ inline T floor_divide(T a, T b) {
  if constexpr (is_f<T>) {
    if (b == T(0)) return a / b;
    T mod = fmod(a, b);
    T div = (a - mod) / b;
    if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
    if (div == T(0)) return copysign(T(0), a / b);
    T floored = floor(div);
    if (div - floored > T(0.5)) floored += T(1);
    return floored;
  } else {
    if (b == T(0)) return T(0);  // flagged through the status word
    if constexpr (std::is_signed_v<T>) {
      if (b == T(-1)) return static_cast<T>(Wide<T>(0) - static_cast<Wide<T>>(a));
      T q = a / b;
      if (a % b != T(0) && ((a < T(0)) != (b < T(0)))) q -= T(1);
      return q;
    } else {
      return a / b;
    }
  }
}

template <class T, int K>
struct BinaryFn {
  using R = std::conditional_t<binary_bool_result(K), bool, T>;
  __device__ R operator()(T a, T b) const {
    if constexpr (K == b_add) {
      if constexpr (is_b<T>)
        return a || b;
      else if constexpr (is_f<T>)
        return a + b;
      else
        return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    } else if constexpr (K == b_sub) {
      if constexpr (is_f<T>)
        return a - b;
      else
        return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
    } else if constexpr (K == b_mul) {
      if constexpr (is_b<T>)
        return a && b;
      else if constexpr (is_f<T>)
        return a * b;
      else
        return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    } else if constexpr (K == b_div) {
      return a / b;
    } else if constexpr (K == b_pow) {
      if constexpr (is_f<T>)
        return pow(a, b);
      else
        return int_pow(a, b);
    } else if constexpr (K == b_remainder) {
      return py_remainder(a, b);
    } else if constexpr (K == b_floor_divide) {
      return floor_divide(a, b);
    } else if constexpr (K == b_maximum || K == b_minimum) {
      if constexpr (is_f<T>)
        if (isnan(a) || isnan(b)) return quiet_nan<T>();
      // On a tie (+0 and -0) the first operand, as the CPU and reference.
      if constexpr (K == b_maximum)
        return a < b ? b : a;
      else
        return b < a ? b : a;
    } else if constexpr (K == b_atan2) {
      return atan2(a, b);
    } else if constexpr (K == b_eq)
      return a == b;
    else if constexpr (K == b_ne)
      return a != b;
    else if constexpr (K == b_lt)
      return a < b;
    else if constexpr (K == b_le)
      return a <= b;
    else if constexpr (K == b_gt)
      return a > b;
    else if constexpr (K == b_ge)
      return a >= b;
    else if constexpr (K == b_logical_and)
      return (a != T(0)) && (b != T(0));
    else if constexpr (K == b_logical_or)
      return (a != T(0)) || (b != T(0));
    else if constexpr (K == b_logical_xor)
      return (a != T(0)) != (b != T(0));
    else if constexpr (K == b_bitwise_and)
      return static_cast<T>(a & b);
    else if constexpr (K == b_bitwise_or)
      return static_cast<T>(a | b);
    else if constexpr (K == b_bitwise_xor)
      return static_cast<T>(a ^ b);
    else
      static_assert(K < 0, "a binary kind without a CUDA kernel");  // K is never negative
  }
};

// The stored result of a binary op on storage type S: bool for
// comparisons and logical ops.
template <class S, int K>
using BinaryOut = std::conditional_t<binary_bool_result(K), bool, S>;

// One element: operands widened to the compute type (a null operand
// pointer stands for its scalar, already in the compute type; a uniform
// branch per launch), the result rounded once into the output type.
template <class S, int K>
__device__ inline BinaryOut<S, K> binary_element(const BinaryFn<Opmath<S>, K>& fn, Opmath<S> x, Opmath<S> y) {
  return convert<typename BinaryFn<Opmath<S>, K>::R, BinaryOut<S, K>>(fn(x, y));
}

template <class S, int K>
__global__ void binary_kernel(const S* a, const S* b, Opmath<S> sa, Opmath<S> sb, BinaryOut<S, K>* out,
                              Layout<2> layout, int64_t n, int64_t* status) {
  using T = Opmath<S>;
  BinaryFn<T, K> fn;
  SY_GRID_STRIDE(i, n) {
    int64_t off[2];
    offsets(layout, i, off);
    const T x = a ? widen(a[off[0]]) : sa;
    const T y = b ? widen(b[off[1]]) : sb;
    if constexpr (int_division<K> && !is_f<T>)
      if (y == T(0) && status) flag(status, 0);
    out[i] = binary_element<S, K>(fn, x, y);
  }
}

// Fast paths for contiguous operands (or scalars): no per-element layout
// math. Element types of 4 or 8 bytes with a same-type result move 16 bytes
// per load and store when every pointer is 16-byte aligned.
template <class T, int K>
__device__ inline void binary_check(T y, int64_t* status) {
  if constexpr (int_division<K> && !is_f<T>)
    if (y == T(0) && status) flag(status, 0);
}

template <class S, int K, class Index>
__global__ void binary_contiguous_kernel(const S* a, const S* b, Opmath<S> sa, Opmath<S> sb, BinaryOut<S, K>* out,
                                         Index n, int64_t* status) {
  using T = Opmath<S>;
  BinaryFn<T, K> fn;
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const T x = a ? widen(a[i]) : sa;
    const T y = b ? widen(b[i]) : sb;
    binary_check<T, K>(y, status);
    out[i] = binary_element<S, K>(fn, x, y);
  }
}

template <class T>
struct alignas(16) Vec16 {
  static constexpr int width = 16 / sizeof(T);
  T v[width];
};

// The output has the operands' storage type S (2, 4 or 8 bytes).
template <class S, int K>
__global__ void binary_vector_kernel(const S* a, const S* b, Opmath<S> sa, Opmath<S> sb, S* out, int64_t n,
                                     int64_t* status) {
  using T = Opmath<S>;
  using V = Vec16<S>;
  BinaryFn<T, K> fn;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = n / V::width;
  for (int64_t i = first; i < vectors; i += stride) {
    V x, y, r;
    if (a) x = reinterpret_cast<const V*>(a)[i];
    if (b) y = reinterpret_cast<const V*>(b)[i];
#pragma unroll
    for (int k = 0; k < V::width; ++k) {
      const T xv = a ? widen(x.v[k]) : sa;
      const T yv = b ? widen(y.v[k]) : sb;
      binary_check<T, K>(yv, status);
      r.v[k] = binary_element<S, K>(fn, xv, yv);
    }
    reinterpret_cast<V*>(out)[i] = r;
  }
  for (int64_t i = vectors * V::width + first; i < n; i += stride) {
    const T x = a ? widen(a[i]) : sa;
    const T y = b ? widen(b[i]) : sb;
    binary_check<T, K>(y, status);
    out[i] = binary_element<S, K>(fn, x, y);
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Whether operand k of a binary layout walks its data contiguously in flat
// order (a null pointer is a scalar and always qualifies).
inline bool flat_operand(const void* p, const Layout<2>& layout, int k) {
  return !p || layout.rank == 0 || (layout.rank == 1 && layout.strides[k][0] == 1);
}

// `sa` and `sb` are the scalars already in the compute type.
template <class S, int K = 0>
cudaError_t dispatch_binary(const Launch& l, int kind, const S* a, const S* b, Opmath<S> sa, Opmath<S> sb, void* out,
                            const Layout<2>& layout, int64_t n, int64_t* status) {
  if constexpr (K >= b_count) {
    return cudaErrorNotSupported;
  } else {
    if (kind != K) return dispatch_binary<S, K + 1>(l, kind, a, b, sa, sb, out, layout, n, status);
    if constexpr (!binary_valid<Opmath<S>>(K)) {
      return cudaErrorNotSupported;
    } else {
      using R = BinaryOut<S, K>;
      if (flat_operand(a, layout, 0) && flat_operand(b, layout, 1)) {
        if constexpr (std::is_same_v<R, S> && (sizeof(S) == 2 || sizeof(S) == 4 || sizeof(S) == 8))
          if ((!a || aligned16(a)) && (!b || aligned16(b)) && aligned16(out))
            return launch(l, (n + Vec16<S>::width - 1) / Vec16<S>::width, binary_vector_kernel<S, K>, a, b, sa, sb,
                          static_cast<R*>(out), n, status);
        if (n <= INT32_MAX)  // 32-bit index math where the tensor allows
          return launch(l, n, binary_contiguous_kernel<S, K, uint32_t>, a, b, sa, sb, static_cast<R*>(out),
                        static_cast<uint32_t>(n), status);
        return launch(l, n, binary_contiguous_kernel<S, K, int64_t>, a, b, sa, sb, static_cast<R*>(out), n, status);
      }
      return launch(l, n, binary_kernel<S, K>, a, b, sa, sb, static_cast<R*>(out), layout, n, status);
    }
  }
}

// --- where ------------------------------------------------------------

template <class W>
__global__ void where_kernel(const uint8_t* c, const W* a, const W* b, W* out, Layout<3> layout, int64_t n) {
  SY_GRID_STRIDE(i, n) {
    int64_t off[3];
    offsets(layout, i, off);
    out[i] = c[off[0]] ? a[off[1]] : b[off[2]];
  }
}

}  // namespace

cudaError_t cast(Launch l, const void* src, DType from, void* dst, DType to, int64_t n) {
  return by_dtype(from, [&](auto s) {
    using S = decltype(s);
    return by_dtype(to, [&](auto d) {
      using D = decltype(d);
      return launch(l, n, cast_kernel<S, D>, static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
}

cudaError_t unary(Launch l, int kind, DType t, const void* in, void* out, int64_t n, double a, double b) {
  return by_dtype(t, [&](auto tag) {
    using S = decltype(tag);
    return dispatch_unary<S>(l, kind, static_cast<const S*>(in), out, n, a, b);
  });
}

cudaError_t binary(Launch l, int kind, DType t, const void* lhs, const void* rhs, double lhs_scalar, double rhs_scalar,
                   void* out, const Layout<2>& layout, int64_t n, int64_t* status) {
  return by_dtype(t, [&](auto tag) {
    using S = decltype(tag);
    // A scalar is rounded to the storage type first, as the CPU does.
    return dispatch_binary<S>(l, kind, static_cast<const S*>(lhs), static_cast<const S*>(rhs),
                              widen(from_double<S>(lhs_scalar)), widen(from_double<S>(rhs_scalar)), out, layout, n,
                              status);
  });
}

cudaError_t binary_scalar(Launch l, int kind, DType t, const void* tensor, const void* scalar_value, bool scalar_first,
                          void* out, const Layout<2>& layout, int64_t n, int64_t* status) {
  return by_dtype(t, [&](auto tag) {
    using S = decltype(tag);
    S s;
    std::memcpy(&s, scalar_value, sizeof(S));
    const S* x = static_cast<const S*>(tensor);
    return dispatch_binary<S>(l, kind, scalar_first ? nullptr : x, scalar_first ? x : nullptr, widen(s), widen(s), out,
                              layout, n, status);
  });
}

cudaError_t where(Launch l, size_t width, const uint8_t* cond, const void* lhs, const void* rhs, void* out,
                  const Layout<3>& layout, int64_t n) {
  return by_width(width, [&](auto tag) {
    using W = decltype(tag);
    return launch(l, n, where_kernel<W>, cond, static_cast<const W*>(lhs), static_cast<const W*>(rhs),
                  static_cast<W*>(out), layout, n);
  });
}

}  // namespace switchyard::backends::cuda::kern
