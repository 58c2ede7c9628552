// SPDX-License-Identifier: Apache-2.0
// Highway's dynamic dispatch: this file is compiled once per instruction-set
// target (foreach_target.h re-includes it), and HWY_DYNAMIC_DISPATCH picks
// the best one the CPU supports on the first call.

#include <algorithm>
#include <cstring>
#include <limits>

// Highway's order: foreach_target.h, then highway.h, then the -inl headers.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/vector_math.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace switchyard::backends::cpu::vector_math::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The last n % Lanes values go through a zero-padded copy: a plain load
// would read past the row (masked loads are only fault-free on AVX-512).
template <class D, class T, class F>
void for_vectors(D d, const T* x, T* y, int64_t n, F&& f) {
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = f(hn::LoadU(d, x + i), lanes);
    if (y != nullptr) hn::StoreU(v, d, y + i);
  }
  if (i == n) return;
  HWY_ALIGN T tail[HWY_MAX_BYTES / sizeof(T)] = {};
  const auto rest = static_cast<size_t>(n - i);
  std::memcpy(tail, x + i, rest * sizeof(T));
  const auto v = f(hn::Load(d, tail), n - i);
  if (y != nullptr) {
    hn::Store(v, d, tail);
    std::memcpy(y + i, tail, rest * sizeof(T));
  }
}

template <class T>
T MaxImpl(const T* x, int64_t n) {
  const hn::ScalableTag<T> d;
  auto best = hn::Set(d, -std::numeric_limits<T>::infinity());
  const auto lowest = best;
  for_vectors(d, x, static_cast<T*>(nullptr), n, [&](auto v, int64_t valid) {
    // Padding lanes must not win: they are 0.
    best = hn::Max(best, hn::IfThenElse(hn::FirstN(d, static_cast<size_t>(valid)), v, lowest));
    return v;
  });
  return hn::GetLane(hn::MaxOfLanes(d, best));
}

template <class T>
T ExpSumImpl(const T* x, T shift, T* y, int64_t n) {
  const hn::ScalableTag<T> d;
  const auto s = hn::Set(d, shift);
  auto sum = hn::Zero(d);
  for_vectors(d, x, y, n, [&](auto v, int64_t valid) {
    const auto diff = hn::Sub(v, s);
    // Highway's Exp returns 0 for NaN (it tests x >= lower bound).
    auto e = hn::IfThenElse(hn::IsNaN(diff), diff, hn::Exp(d, diff));
    e = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(valid)), e);
    sum = hn::Add(sum, e);
    return e;
  });
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

template <class T>
void ScaleImpl(const T* x, T factor, T* y, int64_t n) {
  const hn::ScalableTag<T> d;
  const auto f = hn::Set(d, factor);
  for_vectors(d, x, y, n, [&](auto v, int64_t) { return hn::Mul(v, f); });
}

template <class T>
void SubtractImpl(const T* x, T a, T b, T* y, int64_t n) {
  const hn::ScalableTag<T> d;
  const auto va = hn::Set(d, a), vb = hn::Set(d, b);
  for_vectors(d, x, y, n, [&](auto v, int64_t) { return hn::Sub(hn::Sub(v, va), vb); });
}

float MaxF32(const float* x, int64_t n) { return MaxImpl(x, n); }
double MaxF64(const double* x, int64_t n) { return MaxImpl(x, n); }
float ExpSumF32(const float* x, float shift, float* y, int64_t n) { return ExpSumImpl(x, shift, y, n); }
double ExpSumF64(const double* x, double shift, double* y, int64_t n) { return ExpSumImpl(x, shift, y, n); }
void ScaleF32(const float* x, float s, float* y, int64_t n) { ScaleImpl(x, s, y, n); }
void ScaleF64(const double* x, double s, double* y, int64_t n) { ScaleImpl(x, s, y, n); }
void SubtractF32(const float* x, float a, float b, float* y, int64_t n) { SubtractImpl(x, a, b, y, n); }
void SubtractF64(const double* x, double a, double b, double* y, int64_t n) { SubtractImpl(x, a, b, y, n); }

}  // namespace switchyard::backends::cpu::vector_math::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "backends/cpu/vector_math.hpp"

namespace switchyard::backends::cpu::vector_math {

HWY_EXPORT(MaxF32);
HWY_EXPORT(MaxF64);
HWY_EXPORT(ExpSumF32);
HWY_EXPORT(ExpSumF64);
HWY_EXPORT(ScaleF32);
HWY_EXPORT(ScaleF64);
HWY_EXPORT(SubtractF32);
HWY_EXPORT(SubtractF64);

float max(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(MaxF32)(x, n); }
double max(const double* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(MaxF64)(x, n); }
float exp_sum(const float* x, float shift, float* y, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(ExpSumF32)(x, shift, y, n);
}
double exp_sum(const double* x, double shift, double* y, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(ExpSumF64)(x, shift, y, n);
}
void scale(const float* x, float s, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(ScaleF32)(x, s, y, n); }
void scale(const double* x, double s, double* y, int64_t n) { HWY_DYNAMIC_DISPATCH(ScaleF64)(x, s, y, n); }
void subtract(const float* x, float a, float b, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SubtractF32)(x, a, b, y, n);
}
void subtract(const double* x, double a, double b, double* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SubtractF64)(x, a, b, y, n);
}

}  // namespace switchyard::backends::cpu::vector_math
#endif  // HWY_ONCE
