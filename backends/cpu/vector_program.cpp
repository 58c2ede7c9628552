// SPDX-License-Identifier: Apache-2.0
// Highway's dynamic dispatch: this file is compiled once per instruction-set
// target (foreach_target.h re-includes it), and HWY_DYNAMIC_DISPATCH picks
// the best one the CPU supports on the first call.

#include <algorithm>
#include <cstring>
#include <limits>

// Highway's order: foreach_target.h, then highway.h.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/vector_program.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include "backends/cpu/vector_program.hpp"

HWY_BEFORE_NAMESPACE();
namespace switchyard::backends::cpu::vector_program::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Elements go through a program a group of four vectors at a time: the
// accumulator is four vector registers, so each instruction's decoding is
// shared by four vectors' work, and a slot is a few cache lines.
constexpr size_t group_vectors = 4;

template <class T>
class Interpreter {
  using D = hn::ScalableTag<T>;
  using V = hn::Vec<D>;
  // A slot's elements, padded to the widest vector of any target.
  static constexpr size_t slot_capacity = group_vectors * HWY_MAX_BYTES / sizeof(T);

 public:
  explicit Interpreter(const Program<T>& program) : program_(program), lanes_(hn::Lanes(d_)) {
    const size_t constants = program.constants.size();
    for (size_t c = 0; c < constants; ++c) {
      for (size_t v = 0; v < group_vectors; ++v)
        hn::Store(hn::Set(d_, program.constants[c]), d_, owned_[c] + v * lanes_);
      slots_[static_cast<size_t>(program.inputs) + c] = owned_[c];
    }
    for (size_t s = 0; s < static_cast<size_t>(program.spills); ++s)
      slots_[static_cast<size_t>(program.inputs) + constants + s] = owned_[constants + s];
  }

  void run(const T* const* inputs, T* out, int64_t n) {
    const auto group = static_cast<int64_t>(group_vectors * lanes_);
    int64_t i = 0;
    for (; i + group <= n; i += group) {
      for (int k = 0; k < program_.inputs; ++k) slots_[k] = inputs[k] + i;
      execute(out + i);
    }
    if (i == n) return;
    // The last partial group runs on zero-padded copies: loads past the
    // end could fault. The padding's results are dropped.
    const auto rest = static_cast<size_t>(n - i);
    HWY_ALIGN T tail[max_inputs + 1][slot_capacity] = {};
    for (int k = 0; k < program_.inputs; ++k) {
      std::memcpy(tail[k], inputs[k] + i, rest * sizeof(T));
      slots_[k] = tail[k];
    }
    execute(tail[max_inputs]);
    std::memcpy(out + i, tail[max_inputs], rest * sizeof(T));
    for (int k = 0; k < program_.inputs; ++k) slots_[k] = nullptr;  // the copies die here
  }

 private:
  // The accumulator lives in a0..a3, named variables rather than an array,
  // so that the compiler keeps them in registers across the dispatch.
  HWY_INLINE void execute(T* out) {
    const D d;
    const size_t lanes = lanes_;
    const auto zero = hn::Zero(d);
    const auto one = hn::Set(d, T(1));
    const auto nan = hn::Set(d, std::numeric_limits<T>::quiet_NaN());
    V a0 = zero, a1 = zero, a2 = zero, a3 = zero;
    const T* src = nullptr;
    auto at = [&](size_t v) { return hn::LoadU(d, src + v * lanes); };
    auto unary = [&](auto f) {
      a0 = f(a0);
      a1 = f(a1);
      a2 = f(a2);
      a3 = f(a3);
    };
    auto binary = [&](auto f) {
      a0 = f(a0, at(0));
      a1 = f(a1, at(1));
      a2 = f(a2, at(2));
      a3 = f(a3, at(3));
    };
    auto reversed = [&](auto f) {
      a0 = f(at(0), a0);
      a1 = f(at(1), a1);
      a2 = f(at(2), a2);
      a3 = f(at(3), a3);
    };
    const auto add = [](V x, V y) { return hn::Add(x, y); };
    const auto sub = [](V x, V y) { return hn::Sub(x, y); };
    const auto mul = [](V x, V y) { return hn::Mul(x, y); };
    const auto div = [](V x, V y) { return hn::Div(x, y); };
    // On a tie (+0 and -0) the first operand, as element_fns' nan_max/nan_min.
    const auto maximum = [&](V x, V y) {
      return hn::IfThenElse(hn::Or(hn::IsNaN(x), hn::IsNaN(y)), nan, hn::IfThenElse(hn::Lt(x, y), y, x));
    };
    const auto minimum = [&](V x, V y) {
      return hn::IfThenElse(hn::Or(hn::IsNaN(x), hn::IsNaN(y)), nan, hn::IfThenElse(hn::Lt(y, x), y, x));
    };
    for (const Instruction& ins : program_.code) {
      src = slots_[ins.operand];
      switch (ins.code) {
        case Code::load:
          a0 = at(0);
          a1 = at(1);
          a2 = at(2);
          a3 = at(3);
          break;
        case Code::spill: {
          T* slot = owned_[ins.operand - program_.inputs];
          hn::Store(a0, d, slot);
          hn::Store(a1, d, slot + lanes);
          hn::Store(a2, d, slot + 2 * lanes);
          hn::Store(a3, d, slot + 3 * lanes);
          break;
        }
        case Code::add:
          binary(add);
          break;
        case Code::radd:
          reversed(add);
          break;
        case Code::sub:
          binary(sub);
          break;
        case Code::rsub:
          reversed(sub);
          break;
        case Code::mul:
          binary(mul);
          break;
        case Code::rmul:
          reversed(mul);
          break;
        case Code::div:
          binary(div);
          break;
        case Code::rdiv:
          reversed(div);
          break;
        case Code::maximum:
          binary(maximum);
          break;
        case Code::rmaximum:
          reversed(maximum);
          break;
        case Code::minimum:
          binary(minimum);
          break;
        case Code::rminimum:
          reversed(minimum);
          break;
        case Code::clamp_low:
          binary([](V x, V b) { return hn::IfThenElse(hn::Lt(x, b), b, x); });
          break;
        case Code::clamp_high:
          binary([](V x, V b) { return hn::IfThenElse(hn::Gt(x, b), b, x); });
          break;
        case Code::neg:
          unary([](V x) { return hn::Neg(x); });  // the sign flipped: -(+0) is -0
          break;
        case Code::abs:
          unary([](V x) { return hn::Abs(x); });  // the sign cleared: |-0| is +0
          break;
        case Code::relu:
          unary([&](V x) { return hn::IfThenZeroElse(hn::Lt(x, zero), x); });  // NaN and -0 kept
          break;
        case Code::sign:
          unary([&](V x) {
            return hn::IfThenElse(hn::Gt(x, zero), one, hn::IfThenElse(hn::Lt(x, zero), hn::Neg(one), zero));
          });
          break;
        case Code::floor:
          unary([](V x) { return hn::Floor(x); });
          break;
        case Code::ceil:
          unary([](V x) { return hn::Ceil(x); });
          break;
        case Code::round:
          unary([](V x) { return hn::Round(x); });
          break;
        case Code::sqrt:
          unary([](V x) { return hn::Sqrt(x); });
          break;
        case Code::rsqrt:
          unary([&](V x) { return hn::Div(one, hn::Sqrt(x)); });
          break;
        case Code::reciprocal:
          unary([&](V x) { return hn::Div(one, x); });
          break;
      }
    }
    hn::StoreU(a0, d, out);
    hn::StoreU(a1, d, out + lanes);
    hn::StoreU(a2, d, out + 2 * lanes);
    hn::StoreU(a3, d, out + 3 * lanes);
  }

  const Program<T>& program_;
  const D d_;
  const size_t lanes_;
  // Slot pointers: the inputs' (moved along group by group), then the
  // constants' and spill slots' own storage.
  const T* slots_[max_inputs + max_registers] = {};
  HWY_ALIGN T owned_[max_registers][slot_capacity];
};

void RunF32(const Program<float>& p, const float* const* in, float* out, int64_t n) {
  Interpreter<float>(p).run(in, out, n);
}
void RunF64(const Program<double>& p, const double* const* in, double* out, int64_t n) {
  Interpreter<double>(p).run(in, out, n);
}

}  // namespace switchyard::backends::cpu::vector_program::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace switchyard::backends::cpu::vector_program {

HWY_EXPORT(RunF32);
HWY_EXPORT(RunF64);

void run(const Program<float>& program, const float* const* inputs, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(RunF32)(program, inputs, out, n);
}
void run(const Program<double>& program, const double* const* inputs, double* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(RunF64)(program, inputs, out, n);
}

}  // namespace switchyard::backends::cpu::vector_program
#endif  // HWY_ONCE
