// SPDX-License-Identifier: Apache-2.0
// Fused element-wise chains: one pass over memory for a chain such as
// relu(x * 2 + 1). The chain is compiled into a short program of steps
// (gather a broadcast input, convert between dtypes, apply one op's element
// function) over tiles of a few thousand elements; each thread runs the
// whole program tile by tile on scratch buffers that stay in its cache, so
// only the chain's inputs are read from memory and only its last output is
// written there.
//
// Why the bits are those of the unfused ops: every step is a piece of an
// unfused kernel applied to a range instead of the whole tensor. Each op
// keeps its compute dtype and its output dtype (an f16 intermediate is
// rounded to f16, an i8 one wraps), conversions are convert_range (what
// convert() runs per chunk), the 16-bit widening follows plan_widening (what
// widen_halves applies), and the arithmetic is the same element function
// from element_fns.hpp. Element-wise work does not depend on where a range
// starts, and the build keeps floating-point contraction off (ISO C++ mode),
// so fusing two ops' loops cannot turn a multiply and an add into an FMA.

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "backends/cpu/element_fns.hpp"
#include "backends/cpu/kernels.hpp"
#include "backends/cpu/vector_program.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard::backends::cpu {
namespace {

using namespace element;

// Elements per tile: a tile of each live value (at most 8 bytes an element)
// stays in L1/L2 while the program runs over it. Measured on relu(x*2+1)
// and the GELU chain (docs/PERFORMANCE.md).
constexpr int64_t tile_elements = 2048;
constexpr size_t scratch_alignment = 64;

/// An input broadcast to the output as `src[(i / repeat) % period]` for
/// output element i: its non-1 axes form one band of the output's axes
/// (a scalar, a [C] bias against [N, C], a [C, 1, 1] one against
/// [N, C, H, W], a [N, 1] column). Same shape: period = numel, repeat = 1.
struct Band {
  int64_t period = 1;
  int64_t repeat = 1;
};

std::optional<Band> band_of(const Shape& in, const Shape& out) {
  const size_t rank = out.rank(), in_rank = in.rank();
  if (in_rank > rank) return std::nullopt;
  Band band;
  enum class Phase { after_band, in_band, before_band } phase = Phase::after_band;
  for (size_t k = rank; k-- > 0;) {
    const int64_t o = out.dims[k];
    const int64_t i = k + in_rank >= rank ? in.dims[k + in_rank - rank] : 1;
    if (o == 1) continue;  // size-1 output axes are no axis at all here
    if (i == o) {
      if (phase == Phase::before_band) return std::nullopt;
      phase = Phase::in_band;
      band.period *= o;
    } else if (i == 1) {
      if (phase == Phase::after_band)
        band.repeat *= o;
      else
        phase = Phase::before_band;
    } else {
      return std::nullopt;
    }
  }
  return band;
}

bool banded(const TensorIr& in, const TensorIr& out) { return band_of(in.shape, out.shape).has_value(); }

// An integer remainder or floor_divide fails on a zero divisor, which only
// the data shows: those run alone, so the failure stays with that op.
bool may_divide_by_zero(const BinaryOp& op) { return divides(op.kind) && !is_floating(binary_compute_dtype(op)); }
bool may_divide_by_zero(const ScalarOp& op) {
  const DType compute = scalar_compute_dtype(op);
  if (!divides(op.kind) || is_floating(compute)) return false;
  if (op.scalar_first) return true;
  return visit_compute_dtype(compute, [&](auto tag) { return op.scalar.as<decltype(tag)>() == decltype(tag)(0); });
}

/// One step of the program, over tile pointers `at` (indexed by slot) for
/// output elements [begin, begin + n).
using Step = std::function<void(std::byte* const* at, int64_t begin, int64_t n)>;

/// The compiled chain.
class Program {
 public:
  Program(std::span<const TensorIr> inputs, std::span<const Bytes* const> bytes, const TensorIr& out) : out_(out) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto& t = inputs[k];
      const auto band = band_of(t.shape, out.shape);
      const int slot = new_slot(t.dtype);
      ids_.emplace_back(t.id, slot);
      if (band->repeat == 1 && band->period == out.numel()) {
        slots_[slot].memory = bytes[k]->data();  // read where it lies, tile by tile
      } else {
        add_step(gather(bytes[k]->data(), size_of(t.dtype), *band, slot), {}, slot);
      }
    }
  }

  /// Appends `op`'s steps; false if an element function is missing (the
  /// rules accepted the op, so a bug of this backend).
  bool add(OperationIr& op) {
    std::array<InputWidening, 3> widening{};
    const auto narrow = plan_widening(op, widening);
    auto result = std::visit([&](auto& o) { return compile(o, widening); }, op.op);
    if (result < 0) return false;
    if (narrow) result = convert(result, *narrow);
    op.each_output([&](const TensorIr& t) { ids_.emplace_back(t.id, result); });
    return true;
  }

  /// Runs the program over the whole output, tiles spread over the pool.
  void run(Context& ctx, std::byte* output) {
    // The last step writes the chain's result: straight into the output.
    slots_[steps_.back().out].memory = output;
    const int buffers = assign_scratch();
    const int64_t n = out_.numel();
    const int64_t tiles = (n + tile_elements - 1) / tile_elements;
    const int64_t tile_bytes = std::min<int64_t>(tile_elements, n) * 8;
    ctx.pool.parallel_for(tiles, std::max<int64_t>(1, parallel_grain / tile_elements), [&](int64_t first, int64_t end) {
      auto scratch =
          std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(buffers * tile_bytes) + scratch_alignment);
      auto* base = scratch.get() + (scratch_alignment - reinterpret_cast<uintptr_t>(scratch.get()) % scratch_alignment);
      std::vector<std::byte*> at(slots_.size());
      for (size_t s = 0; s < slots_.size(); ++s)
        if (slots_[s].scratch >= 0) at[s] = base + slots_[s].scratch * tile_bytes;
      for (int64_t tile = first; tile < end; ++tile) {
        const int64_t begin = tile * tile_elements;
        const int64_t count = std::min(tile_elements, n - begin);
        for (size_t s = 0; s < slots_.size(); ++s)
          if (slots_[s].memory != nullptr)
            at[s] = const_cast<std::byte*>(slots_[s].memory) + begin * static_cast<int64_t>(size_of(slots_[s].dtype));
        for (const auto& step : steps_) step.run(at.data(), begin, count);
      }
    });
  }

 private:
  struct Slot {
    DType dtype;
    const std::byte* memory = nullptr;  // an input read in place, or the output
    int scratch = -1;                   // else: index of its scratch buffer
    size_t last_read = 0;               // index of the last step reading it
  };
  struct StepEntry {
    Step run;
    int out;
  };

  int new_slot(DType t) {
    slots_.push_back(Slot{t});
    return static_cast<int>(slots_.size()) - 1;
  }

  /// `loop`'s body is compiled for each instruction-set level
  /// (isa_clones.hpp): steps are called through std::function, which the
  /// clone of the tile loop cannot inline.
  template <class Loop>
  void add_step(Loop loop, std::initializer_list<int> reads, int out) {
    for (int r : reads) slots_[r].last_read = steps_.size();
    steps_.push_back(
        {Step([loop](std::byte* const* at, int64_t begin, int64_t n) mutable { run_for_this_cpu(loop, at, begin, n); }),
         out});
  }

  int slot_of(const TensorIr& t) const {
    for (auto it = ids_.rbegin(); it != ids_.rend(); ++it)
      if (it->first == t.id) return it->second;
    return -1;  // find_chain hands every input over: cannot happen
  }

  /// Copies the broadcast input's elements of each tile into its scratch
  /// buffer (in the input's own dtype: conversions follow, as unfused).
  template <size_t Width>
  static Step gather(const std::byte* src, Band band, int out) {
    return [=](std::byte* const* at, int64_t begin, int64_t n) {
      std::byte* dst = at[out];
      int64_t j = (begin / band.repeat) % band.period;  // source element
      int64_t r = begin % band.repeat;                  // repeats of it already written
      for (int64_t i = 0; i < n;) {
        if (band.repeat == 1) {  // consecutive source elements: copy spans
          const int64_t span = std::min(band.period - j, n - i);
          std::memcpy(dst + i * Width, src + j * Width, static_cast<size_t>(span) * Width);
          i += span;
          j = j + span == band.period ? 0 : j + span;
          continue;
        }
        const int64_t run = std::min(band.repeat - r, n - i);
        std::byte value[Width];
        std::memcpy(value, src + j * Width, Width);
        for (int64_t k = 0; k < run; ++k) std::memcpy(dst + (i + k) * Width, value, Width);
        i += run;
        r = 0;
        j = j + 1 == band.period ? 0 : j + 1;
      }
    };
  }

  static Step gather(const std::byte* src, size_t width, Band band, int out) {
    switch (width) {
      case 1:
        return gather<1>(src, band, out);
      case 2:
        return gather<2>(src, band, out);
      case 4:
        return gather<4>(src, band, out);
      default:
        return gather<8>(src, band, out);
    }
  }

  /// `from` converted to dtype `to`, as convert() does (a copy when equal).
  int convert(int from, DType to) {
    const DType t = slots_[from].dtype;
    const int out = new_slot(to);
    if (t == to) {
      add_step([=, width = size_of(t)](std::byte* const* at, int64_t,
                                       int64_t n) { std::memcpy(at[out], at[from], static_cast<size_t>(n) * width); },
               {from}, out);
    } else {
      add_step([=](std::byte* const* at, int64_t, int64_t n) { convert_range(at[from], t, at[out], to, n); }, {from},
               out);
    }
    return out;
  }

  /// Input `t` as the kernel reads it: widened as widen_halves would, then
  /// converted to `compute` as the kernel's as_dtype would.
  int operand(const TensorIr& t, const InputWidening& w, DType compute) {
    int s = slot_of(t);
    if (w.widened) {
      if (w.through) s = convert(s, *w.through);
      s = convert(s, DType::f32);
    }
    return slots_[s].dtype == compute ? s : convert(s, compute);
  }

  int compile(UnaryOp& op, std::span<const InputWidening> w) {
    const DType compute = unary_compute_dtype(op);
    const int in = operand(op.in, w[0], compute);
    int out = -1;
    visit_compute_dtype(compute, [&](auto tag) {
      using T = decltype(tag);
      return with_unary<T>(op.kind, op.a, op.b, [&](auto fn) {
        using R = decltype(fn(T{}));
        if (dtype_of_v<R> != op.out.dtype) return false;
        out = new_slot(op.out.dtype);
        add_step(
            [=](std::byte* const* at, int64_t, int64_t n) {
              const T* x = reinterpret_cast<const T*>(at[in]);
              R* o = reinterpret_cast<R*>(at[out]);
              for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i]);
            },
            {in}, out);
        return true;
      });
    });
    return out;
  }

  int compile(BinaryOp& op, std::span<const InputWidening> w) {
    const DType compute = binary_compute_dtype(op);
    const int lhs = operand(op.lhs, w[0], compute);
    const int rhs = operand(op.rhs, w[1], compute);
    int out = -1;
    visit_compute_dtype(compute, [&](auto tag) {
      using T = decltype(tag);
      return with_binary<T>(op.kind, [&](auto fn) {
        using R = decltype(fn(T{}, T{}));
        if (dtype_of_v<R> != op.out.dtype) return false;
        out = new_slot(op.out.dtype);
        add_step(
            [=](std::byte* const* at, int64_t, int64_t n) {
              const T* a = reinterpret_cast<const T*>(at[lhs]);
              const T* b = reinterpret_cast<const T*>(at[rhs]);
              R* o = reinterpret_cast<R*>(at[out]);
              for (int64_t i = 0; i < n; ++i) o[i] = fn(a[i], b[i]);
            },
            {lhs, rhs}, out);
        return true;
      });
    });
    return out;
  }

  int compile(ScalarOp& op, std::span<const InputWidening> w) {
    const DType compute = scalar_compute_dtype(op);
    const int lhs = operand(op.lhs, w[0], compute);
    int out = -1;
    visit_compute_dtype(compute, [&](auto tag) {
      using T = decltype(tag);
      const T s = op.scalar.as<T>();
      return with_binary<T>(op.kind, [&](auto fn) {
        using R = decltype(fn(T{}, T{}));
        if (dtype_of_v<R> != op.out.dtype) return false;
        out = new_slot(op.out.dtype);
        if (op.scalar_first)
          add_step(
              [=](std::byte* const* at, int64_t, int64_t n) {
                const T* x = reinterpret_cast<const T*>(at[lhs]);
                R* o = reinterpret_cast<R*>(at[out]);
                for (int64_t i = 0; i < n; ++i) o[i] = fn(s, x[i]);
              },
              {lhs}, out);
        else
          add_step(
              [=](std::byte* const* at, int64_t, int64_t n) {
                const T* x = reinterpret_cast<const T*>(at[lhs]);
                R* o = reinterpret_cast<R*>(at[out]);
                for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i], s);
              },
              {lhs}, out);
        return true;
      });
    });
    return out;
  }

  int compile(CastOp& op, std::span<const InputWidening>) { return convert(slot_of(op.in), op.out.dtype); }

  int compile(WhereOp& op, std::span<const InputWidening> w) {
    const int cond = slot_of(op.cond);
    const int lhs = operand(op.lhs, w[1], op.out.dtype);
    const int rhs = operand(op.rhs, w[2], op.out.dtype);
    const int out = new_slot(op.out.dtype);
    visit_dtype(op.out.dtype, [&](auto tag) {
      using T = decltype(tag);
      add_step(
          [=](std::byte* const* at, int64_t, int64_t n) {
            const auto* c = reinterpret_cast<const uint8_t*>(at[cond]);
            const T* x = reinterpret_cast<const T*>(at[lhs]);
            const T* y = reinterpret_cast<const T*>(at[rhs]);
            T* o = reinterpret_cast<T*>(at[out]);
            for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
          },
          {cond, lhs, rhs}, out);
    });
    return out;
  }

  template <class Op>
  int compile(Op&, std::span<const InputWidening>) {
    return -1;  // fusible() accepts no other family
  }

  /// Gives every scratch slot a buffer, reusing the buffers of slots no
  /// later step reads. A step's output never shares a buffer with its own
  /// inputs (their element types may differ in size). Returns the count.
  int assign_scratch() {
    std::vector<int> free;
    int count = 0;
    std::vector<std::vector<int>> dying(steps_.size());
    for (size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].memory == nullptr) dying[slots_[s].last_read].push_back(static_cast<int>(s));
    for (size_t i = 0; i < steps_.size(); ++i) {
      auto& out = slots_[steps_[i].out];
      if (out.memory == nullptr) {
        if (free.empty()) {
          out.scratch = count++;
        } else {
          out.scratch = free.back();
          free.pop_back();
        }
      }
      for (int s : dying[i])
        if (slots_[s].scratch >= 0) free.push_back(slots_[s].scratch);
    }
    return count;
  }

  TensorIr out_;
  std::vector<Slot> slots_;
  std::vector<StepEntry> steps_;
  std::vector<std::pair<TensorId, int>> ids_;  // tensor -> slot holding it
};

/// Compiles a chain into a register program (vector_program.hpp) when every
/// op computes in T and is one of the program's exact operations, and every
/// input is either read element by element or a single broadcast element
/// (a constant). Values get registers as they are made and give them back
/// after their last read.
template <class T>
class RegisterProgramBuilder {
  using Code = vector_program::Code;
  static constexpr DType dtype = dtype_of_v<T>;

 public:
  /// The program and the inputs it loads, in order; nothing if the chain
  /// has an op or input the program cannot take.
  std::optional<vector_program::Program<T>> build(std::span<OperationIr> chain, std::span<const TensorIr> inputs,
                                                  std::span<const Bytes* const> bytes, const TensorIr& out,
                                                  std::vector<const T*>& loads) {
    if (out.dtype != dtype) return std::nullopt;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto& t = inputs[k];
      if (t.dtype != dtype) return std::nullopt;
      const auto band = band_of(t.shape, out.shape);
      const auto* data = reinterpret_cast<const T*>(bytes[k]->data());
      if (band->repeat == 1 && band->period == out.numel()) {
        if (loads.size() == vector_program::max_inputs) return std::nullopt;
        values_.emplace_back(t.id, emit(Code::load, static_cast<int>(loads.size())));
        loads.push_back(data);
      } else if (band->period == 1) {
        values_.emplace_back(t.id, constant(data[0]));
      } else {
        return std::nullopt;  // a broadcast band: the tiled program gathers it
      }
    }
    for (auto& op : chain)
      if (!std::visit([&](auto& o) { return add(o); }, op.op)) return std::nullopt;
    return allocate();
  }

 private:
  struct Virtual {
    Code code;
    int out, a, b;
  };

  bool add(const UnaryOp& op) {
    if (op.in.dtype != dtype || unary_compute_dtype(op) != dtype || op.out.dtype != dtype) return false;
    const int x = value(op.in);
    int result = -1;
    switch (op.kind) {
      case UnaryKind::neg:
        result = emit(Code::neg, x);
        break;
      case UnaryKind::abs:
        result = emit(Code::abs, x);
        break;
      case UnaryKind::relu:
        result = emit(Code::relu, x);
        break;
      case UnaryKind::sign:
        result = emit(Code::sign, x);
        break;
      case UnaryKind::floor:
        result = emit(Code::floor, x);
        break;
      case UnaryKind::ceil:
        result = emit(Code::ceil, x);
        break;
      case UnaryKind::round:
        result = emit(Code::round, x);
        break;
      case UnaryKind::sqrt:
        result = emit(Code::sqrt, x);
        break;
      case UnaryKind::rsqrt:
        result = emit(Code::rsqrt, x);
        break;
      case UnaryKind::reciprocal:
        result = emit(Code::reciprocal, x);
        break;
      case UnaryKind::clamp:
        // As element_fns' clamp: the low bound, then the high one.
        result = x;
        if (!std::isnan(op.a)) result = emit(Code::clamp_low, result, constant(clamp_bound<T>(op.a)));
        if (!std::isnan(op.b)) result = emit(Code::clamp_high, result, constant(clamp_bound<T>(op.b)));
        if (result == x) result = emit(Code::clamp_low, x, x);  // no bounds: a copy
        break;
      default:
        return false;
    }
    values_.emplace_back(op.out.id, result);
    return true;
  }

  static std::optional<Code> binary_code(BinaryKind k) {
    switch (k) {
      case BinaryKind::add:
        return Code::add;
      case BinaryKind::sub:
        return Code::sub;
      case BinaryKind::mul:
        return Code::mul;
      case BinaryKind::div:
        return Code::div;
      case BinaryKind::maximum:
        return Code::maximum;
      case BinaryKind::minimum:
        return Code::minimum;
      default:
        return std::nullopt;
    }
  }

  bool add(const BinaryOp& op) {
    const auto code = binary_code(op.kind);
    if (!code || binary_compute_dtype(op) != dtype || op.lhs.dtype != dtype || op.rhs.dtype != dtype ||
        op.out.dtype != dtype)
      return false;
    values_.emplace_back(op.out.id, emit(*code, value(op.lhs), value(op.rhs)));
    return true;
  }

  bool add(const ScalarOp& op) {
    const auto code = binary_code(op.kind);
    if (!code || scalar_compute_dtype(op) != dtype || op.lhs.dtype != dtype || op.out.dtype != dtype) return false;
    const int x = value(op.lhs), s = constant(op.scalar.template as<T>());
    values_.emplace_back(op.out.id, op.scalar_first ? emit(*code, s, x) : emit(*code, x, s));
    return true;
  }

  template <class Op>
  bool add(const Op&) {
    return false;
  }

  int value(const TensorIr& t) const {
    for (auto it = values_.rbegin(); it != values_.rend(); ++it)
      if (it->first == t.id) return it->second;
    return -1;  // find_chain hands every input over: cannot happen
  }

  int emit(Code code, int a, int b = 0) {
    code_.push_back({code, next_++, a, b});
    return code_.back().out;
  }

  int constant(T v) {
    constants_.emplace_back(next_, v);
    return next_++;
  }

  /// Physical registers: constants first, pinned; every other value takes a
  /// free register when made, after the operands read for the last time by
  /// its instruction gave theirs back (an instruction may write a register
  /// it reads: it works vector by vector).
  std::optional<vector_program::Program<T>> allocate() {
    vector_program::Program<T> program;
    std::vector<int> reg(static_cast<size_t>(next_), -1), last_read(static_cast<size_t>(next_), -1);
    for (const auto& [v, c] : constants_) {
      reg[v] = static_cast<int>(program.constants.size());
      program.constants.push_back(c);
    }
    for (size_t i = 0; i < code_.size(); ++i) {
      const auto& ins = code_[i];
      if (ins.code == Code::load) continue;
      last_read[ins.a] = static_cast<int>(i);
      if (uses_b(ins.code)) last_read[ins.b] = static_cast<int>(i);
    }
    const int result = code_.back().out;
    last_read[result] = static_cast<int>(code_.size());
    std::vector<int> free;
    int count = static_cast<int>(program.constants.size());
    for (size_t i = 0; i < code_.size(); ++i) {
      const auto& ins = code_[i];
      vector_program::Instruction out{ins.code, 0, 0, 0};
      if (ins.code == Code::load) {
        out.a = static_cast<uint8_t>(ins.a);
      } else {
        out.a = static_cast<uint8_t>(reg[ins.a]);
        if (uses_b(ins.code)) out.b = static_cast<uint8_t>(reg[ins.b]);
        for (int operand : {ins.a, uses_b(ins.code) ? ins.b : -1})
          if (operand >= 0 && last_read[operand] == static_cast<int>(i) && reg[operand] >= ssize(constants_) &&
              std::find(free.begin(), free.end(), reg[operand]) == free.end())
            free.push_back(reg[operand]);
      }
      if (free.empty()) {
        reg[ins.out] = count++;
      } else {
        reg[ins.out] = free.back();
        free.pop_back();
      }
      if (count > vector_program::max_registers) return std::nullopt;
      out.out = static_cast<uint8_t>(reg[ins.out]);
      program.code.push_back(out);
    }
    program.registers = count;
    program.result = static_cast<uint8_t>(reg[result]);
    program.inputs = static_cast<int>(
        std::count_if(code_.begin(), code_.end(), [](const Virtual& v) { return v.code == Code::load; }));
    return program;
  }

  static bool uses_b(Code c) {
    switch (c) {
      case Code::add:
      case Code::sub:
      case Code::mul:
      case Code::div:
      case Code::maximum:
      case Code::minimum:
      case Code::clamp_low:
      case Code::clamp_high:
        return true;
      default:
        return false;
    }
  }

  std::vector<Virtual> code_;
  std::vector<std::pair<int, T>> constants_;      // value -> its constant
  std::vector<std::pair<TensorId, int>> values_;  // tensor -> value holding it
  int next_ = 0;
};

/// Runs the chain as a register program if it is one; false if not.
template <class T>
bool run_register_program(Context& ctx, std::span<OperationIr> chain, std::span<const TensorIr> inputs,
                          const Inputs& in, const TensorIr& out, std::byte* output) {
  std::vector<const T*> loads;
  const auto program = RegisterProgramBuilder<T>().build(chain, inputs, in.bytes, out, loads);
  if (!program) return false;
  auto* result = reinterpret_cast<T*>(output);
  const int64_t n = out.numel();
  const int64_t tiles = (n + tile_elements - 1) / tile_elements;
  ctx.pool.parallel_for(tiles, std::max<int64_t>(1, parallel_grain / tile_elements), [&](int64_t first, int64_t end) {
    const int64_t begin = first * tile_elements;
    std::array<const T*, vector_program::max_inputs> at{};
    for (size_t k = 0; k < loads.size(); ++k) at[k] = loads[k] + begin;
    vector_program::run(*program, at.data(), result + begin, std::min(n, end * tile_elements) - begin);
  });
  return true;
}

}  // namespace

bool fusible_elementwise(const OperationIr& op) {
  return std::visit(
      [](const auto& o) {
        using Op = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<Op, UnaryOp> || std::is_same_v<Op, CastOp>) {
          return true;
        } else if constexpr (std::is_same_v<Op, ScalarOp>) {
          return !may_divide_by_zero(o);
        } else if constexpr (std::is_same_v<Op, BinaryOp>) {
          return !may_divide_by_zero(o) && banded(o.lhs, o.out) && banded(o.rhs, o.out);
        } else if constexpr (std::is_same_v<Op, WhereOp>) {
          return o.cond.dtype == DType::boolean && banded(o.cond, o.out) && banded(o.lhs, o.out) &&
                 banded(o.rhs, o.out);
        } else {
          return false;
        }
      },
      op.op);
}

Expected<Bytes> fused_elementwise(Context& ctx, std::span<OperationIr> chain, std::span<const TensorIr> inputs,
                                  const Inputs& in) {
  TensorIr out;
  chain.back().each_output([&](const TensorIr& t) { out = t; });
  // The output may take the place of an input used for the last time, as an
  // op-by-op kernel's would: each tile reads an input's elements before the
  // last step writes the same elements of the output.
  std::optional<Bytes> result;
  for (size_t k = 0; k < inputs.size() && !result; ++k)
    if (in.consumable[k] && inputs[k].dtype == out.dtype && inputs[k].shape == out.shape) result = *in.bytes[k];
  if (!result) result = ctx.buffers.allocate(out.bytes());
  if (out.numel() == 0) return std::move(*result);
  std::byte* output = writable_data(*result);
  if (run_register_program<float>(ctx, chain, inputs, in, out, output) ||
      run_register_program<double>(ctx, chain, inputs, in, out, output))
    return std::move(*result);
  Program program(inputs, in.bytes, out);
  for (auto& op : chain)
    if (!program.add(op))
      return DeviceError(Errc::kernel_failure, "cpu: fused chain: no element function for " + op.name());
  program.run(ctx, output);
  return std::move(*result);
}

}  // namespace switchyard::backends::cpu
