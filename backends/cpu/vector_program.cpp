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

// Vectors per register: each instruction works on this many at once, so
// the cost of decoding it is shared, and a register (`group` elements)
// stays a few cache lines.
constexpr size_t vectors_per_register = 4;

template <class T>
class Interpreter {
  using D = hn::ScalableTag<T>;
  using V = hn::Vec<D>;
  // A register's elements, padded to the widest vector of any target.
  static constexpr size_t register_capacity = vectors_per_register * HWY_MAX_BYTES / sizeof(T);

 public:
  explicit Interpreter(const Program<T>& program) : program_(program), lanes_(hn::Lanes(d_)) {
    for (size_t c = 0; c < program.constants.size(); ++c)
      for (size_t v = 0; v < vectors_per_register; ++v) hn::Store(hn::Set(d_, program.constants[c]), d_, at(c, v));
  }

  void run(const T* const* inputs, T* out, int64_t n) {
    const auto group = static_cast<int64_t>(vectors_per_register * lanes_);
    int64_t i = 0;
    for (; i + group <= n; i += group) {
      execute(inputs, i);
      for (size_t v = 0; v < vectors_per_register; ++v)
        hn::StoreU(hn::Load(d_, at(program_.result, v)), d_, out + i + static_cast<int64_t>(v * lanes_));
    }
    if (i == n) return;
    // The last partial group runs on zero-padded copies: loads past the
    // end could fault. The padding's results are dropped.
    const auto rest = static_cast<size_t>(n - i);
    HWY_ALIGN T tail[max_inputs][register_capacity] = {};
    const T* tail_inputs[max_inputs];
    for (int k = 0; k < program_.inputs; ++k) {
      std::memcpy(tail[k], inputs[k] + i, rest * sizeof(T));
      tail_inputs[k] = tail[k];
    }
    execute(tail_inputs, 0);
    std::memcpy(out + i, at(program_.result, 0), rest * sizeof(T));
  }

 private:
  T* at(size_t reg, size_t v) { return registers_[reg] + v * lanes_; }

  template <class F>
  void unary(const Instruction& ins, F&& f) {
    for (size_t v = 0; v < vectors_per_register; ++v) hn::Store(f(hn::Load(d_, at(ins.a, v))), d_, at(ins.out, v));
  }
  template <class F>
  void binary(const Instruction& ins, F&& f) {
    for (size_t v = 0; v < vectors_per_register; ++v)
      hn::Store(f(hn::Load(d_, at(ins.a, v)), hn::Load(d_, at(ins.b, v))), d_, at(ins.out, v));
  }

  void execute(const T* const* inputs, int64_t i) {
    const auto zero = hn::Zero(d_);
    const auto one = hn::Set(d_, T(1));
    const auto nan = hn::Set(d_, std::numeric_limits<T>::quiet_NaN());
    for (const Instruction& ins : program_.code) {
      switch (ins.code) {
        case Code::load:
          for (size_t v = 0; v < vectors_per_register; ++v)
            hn::Store(hn::LoadU(d_, inputs[ins.a] + i + static_cast<int64_t>(v * lanes_)), d_, at(ins.out, v));
          break;
        case Code::add:
          binary(ins, [](V a, V b) { return hn::Add(a, b); });
          break;
        case Code::sub:
          binary(ins, [](V a, V b) { return hn::Sub(a, b); });
          break;
        case Code::mul:
          binary(ins, [](V a, V b) { return hn::Mul(a, b); });
          break;
        case Code::div:
          binary(ins, [](V a, V b) { return hn::Div(a, b); });
          break;
        case Code::maximum:
          binary(ins, [&](V a, V b) {
            return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), nan, hn::IfThenElse(hn::Gt(a, b), a, b));
          });
          break;
        case Code::minimum:
          binary(ins, [&](V a, V b) {
            return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), nan, hn::IfThenElse(hn::Lt(a, b), a, b));
          });
          break;
        case Code::neg:
          unary(ins, [&](V a) { return hn::Sub(zero, a); });
          break;
        case Code::abs:
          unary(ins, [&](V a) { return hn::IfThenElse(hn::Lt(a, zero), hn::Sub(zero, a), a); });
          break;
        case Code::relu:
          unary(ins, [&](V a) { return hn::IfThenElse(hn::Or(hn::Gt(a, zero), hn::IsNaN(a)), a, zero); });
          break;
        case Code::sign:
          unary(ins, [&](V a) {
            return hn::IfThenElse(hn::Gt(a, zero), one, hn::IfThenElse(hn::Lt(a, zero), hn::Neg(one), zero));
          });
          break;
        case Code::floor:
          unary(ins, [](V a) { return hn::Floor(a); });
          break;
        case Code::ceil:
          unary(ins, [](V a) { return hn::Ceil(a); });
          break;
        case Code::round:
          unary(ins, [](V a) { return hn::Round(a); });
          break;
        case Code::sqrt:
          unary(ins, [](V a) { return hn::Sqrt(a); });
          break;
        case Code::rsqrt:
          unary(ins, [&](V a) { return hn::Div(one, hn::Sqrt(a)); });
          break;
        case Code::reciprocal:
          unary(ins, [&](V a) { return hn::Div(one, a); });
          break;
        case Code::clamp_low:
          binary(ins, [](V a, V b) { return hn::IfThenElse(hn::Lt(a, b), b, a); });
          break;
        case Code::clamp_high:
          binary(ins, [](V a, V b) { return hn::IfThenElse(hn::Gt(a, b), b, a); });
          break;
      }
    }
  }

  const Program<T>& program_;
  const D d_;
  const size_t lanes_;
  HWY_ALIGN T registers_[max_registers][register_capacity];
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
