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
#include <array>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "backends/cpu/element_fns.hpp"
#include "backends/cpu/kernels.hpp"
#include "backends/cpu/vector_program.hpp"
#include "switchyard/messages/id_slots.hpp"
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

/// Copies the elements [begin, begin + n) of an input broadcast as `band`
/// (each `width` bytes) to dst.
template <size_t Width>
void gather_band(const std::byte* src, Band band, std::byte* dst, int64_t begin, int64_t n) {
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
}

void gather_band(const std::byte* src, size_t width, Band band, std::byte* dst, int64_t begin, int64_t n) {
  switch (width) {
    case 1:
      return gather_band<1>(src, band, dst, begin, n);
    case 2:
      return gather_band<2>(src, band, dst, begin, n);
    case 4:
      return gather_band<4>(src, band, dst, begin, n);
    default:
      return gather_band<8>(src, band, dst, begin, n);
  }
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
  static Step gather(const std::byte* src, size_t width, Band band, int out) {
    return [=](std::byte* const* at, int64_t begin, int64_t n) { gather_band(src, width, band, at[out], begin, n); };
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

/// An input a register program loads: read in place, or, broadcast as a
/// band, gathered tile by tile first.
template <class T>
struct RegisterLoad {
  const T* data;
  std::optional<Band> band;
};

/// Compiles a chain into a register program (vector_program.hpp) when every
/// op computes in T and is one of the program's exact operations, and every
/// input is either read element by element or a single broadcast element
/// (a constant). The accumulator holds the last op's result; a value a
/// later op still reads is spilled before the accumulator moves on, to a
/// slot given back after that value's last read.
template <class T>
class RegisterProgramBuilder {
  using Code = vector_program::Code;
  static constexpr DType dtype = dtype_of_v<T>;

 public:
  /// The program and the inputs it loads, in order; nothing if the chain
  /// has an op or input the program cannot take.
  std::optional<vector_program::Program<T>> build(std::span<OperationIr> chain, std::span<const TensorIr> inputs,
                                                  std::span<const Bytes* const> bytes, const TensorIr& out,
                                                  std::vector<RegisterLoad<T>>& loads) {
    if (out.dtype != dtype) return std::nullopt;
    // Sized once: a chain of tiny ops spent more growing these than running.
    tensors_.reserve(chain.size() + inputs.size());
    slots_.reserve(2 * chain.size() + inputs.size());
    last_read_.reserve(2 * chain.size() + inputs.size());
    code_.reserve(3 * chain.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto& t = inputs[k];
      if (t.dtype != dtype) return std::nullopt;
      const auto band = band_of(t.shape, out.shape);
      const auto* data = reinterpret_cast<const T*>(bytes[k]->data());
      if (band->period == 1 && band->repeat > 1) {
        tensors_.emplace_back(t.id, constant(data[0]));
      } else {
        if (loads.size() == vector_program::max_inputs) return std::nullopt;
        tensors_.emplace_back(t.id, new_value(Slot{Slot::input, static_cast<int>(loads.size())}));
        const bool whole = band->repeat == 1 && band->period == out.numel();
        loads.push_back({data, whole ? std::nullopt : band});
      }
    }
    // Each tensor's last reader, by op index.
    size_t capacity = 16;
    while (capacity < 2 * (chain.size() + inputs.size())) capacity *= 2;  // the ids a chain names, twice
    rehash(capacity);
    for (size_t j = 0; j < chain.size(); ++j)
      chain[j].each_input([&](const TensorIr& t) { last_reader(t.id) = static_cast<int>(j); });
    for (const auto& [id, v] : tensors_) last_read_[v] = last_reader(id);
    for (op_ = 0; op_ < chain.size(); ++op_)
      if (!std::visit([&](auto& o) { return add(o); }, chain[op_].op)) return std::nullopt;
    if (ssize(constants_) + spills_ > vector_program::max_registers) return std::nullopt;
    return finish(static_cast<int>(loads.size()));
  }

 private:
  /// Where a value can be read besides the accumulator.
  struct Slot {
    enum Kind : uint8_t { none, input, constant, spill } kind = none;
    int index = 0;
  };
  struct Virtual {
    Code code;
    Slot operand;
  };
  /// A unary op's codes, each with a constant operand or -1 (at most two:
  /// clamp's bounds).
  struct Steps {
    std::array<std::pair<Code, int>, 2> items;
    size_t count = 0;
    void push_back(std::pair<Code, int> s) { items[count++] = s; }
    [[nodiscard]] const std::pair<Code, int>* begin() const { return items.data(); }
    [[nodiscard]] const std::pair<Code, int>* end() const { return items.data() + count; }
  };

  bool add(const UnaryOp& op) {
    if (op.in.dtype != dtype || unary_compute_dtype(op) != dtype || op.out.dtype != dtype) return false;
    Steps steps;
    switch (op.kind) {
      case UnaryKind::neg:
        steps.push_back({Code::neg, -1});
        break;
      case UnaryKind::abs:
        steps.push_back({Code::abs, -1});
        break;
      case UnaryKind::relu:
        steps.push_back({Code::relu, -1});
        break;
      case UnaryKind::sign:
        steps.push_back({Code::sign, -1});
        break;
      case UnaryKind::floor:
        steps.push_back({Code::floor, -1});
        break;
      case UnaryKind::ceil:
        steps.push_back({Code::ceil, -1});
        break;
      case UnaryKind::round:
        steps.push_back({Code::round, -1});
        break;
      case UnaryKind::sqrt:
        steps.push_back({Code::sqrt, -1});
        break;
      case UnaryKind::rsqrt:
        steps.push_back({Code::rsqrt, -1});
        break;
      case UnaryKind::reciprocal:
        steps.push_back({Code::reciprocal, -1});
        break;
      case UnaryKind::clamp:
        // As element_fns' clamp: the low bound, then the high one; neither
        // is a copy.
        if (!std::isnan(op.a)) steps.push_back({Code::clamp_low, constant(clamp_bound<T>(op.a))});
        if (!std::isnan(op.b)) steps.push_back({Code::clamp_high, constant(clamp_bound<T>(op.b))});
        break;
      default:
        return false;
    }
    into_accumulator(value(op.in));
    for (const auto& [code, c] : steps) emit(code, c >= 0 ? slots_[c] : Slot{});
    produced(op.out);
    return true;
  }

  static std::optional<std::pair<Code, Code>> binary_codes(BinaryKind k) {
    switch (k) {
      case BinaryKind::add:
        return std::pair{Code::add, Code::radd};
      case BinaryKind::sub:
        return std::pair{Code::sub, Code::rsub};
      case BinaryKind::mul:
        return std::pair{Code::mul, Code::rmul};
      case BinaryKind::div:
        return std::pair{Code::div, Code::rdiv};
      case BinaryKind::maximum:
        return std::pair{Code::maximum, Code::rmaximum};
      case BinaryKind::minimum:
        return std::pair{Code::minimum, Code::rminimum};
      default:
        return std::nullopt;
    }
  }

  bool add(const BinaryOp& op) {
    const auto codes = binary_codes(op.kind);
    if (!codes || binary_compute_dtype(op) != dtype || op.lhs.dtype != dtype || op.rhs.dtype != dtype ||
        op.out.dtype != dtype)
      return false;
    combine(*codes, value(op.lhs), value(op.rhs));
    produced(op.out);
    return true;
  }

  bool add(const ScalarOp& op) {
    const auto codes = binary_codes(op.kind);
    if (!codes || scalar_compute_dtype(op) != dtype || op.lhs.dtype != dtype || op.out.dtype != dtype) return false;
    const int x = value(op.lhs), s = constant(op.scalar.template as<T>());
    if (op.scalar_first)
      combine(*codes, s, x);
    else
      combine(*codes, x, s);
    produced(op.out);
    return true;
  }

  template <class Op>
  bool add(const Op&) {
    return false;
  }

  /// acc = a op b, with op's code and its reversed form.
  void combine(std::pair<Code, Code> codes, int a, int b) {
    if (a == b) {
      into_accumulator(a);
      emit(codes.first, readable(a));
    } else if (accumulator_ == b) {
      into_accumulator(b);
      emit(codes.second, readable(a));
    } else {
      into_accumulator(a);
      emit(codes.first, readable(b));
    }
  }

  /// Makes value v the accumulator for the current op, which will replace
  /// it: whatever the accumulator held (v included) that a later op reads is
  /// spilled first. (The current op's other operand is never the old
  /// accumulator: combine() starts from that one.)
  void into_accumulator(int v) {
    if (accumulator_ >= 0 && slots_[accumulator_].kind == Slot::none &&
        last_read_[accumulator_] > static_cast<int>(op_))
      spill(accumulator_);
    if (accumulator_ != v) emit(Code::load, slots_[v]);
    accumulator_ = v;
  }

  /// A slot holding v (spilled there if v is only in the accumulator).
  Slot readable(int v) {
    if (slots_[v].kind == Slot::none) spill(v);
    return slots_[v];
  }

  void spill(int v) {
    int slot;
    if (free_spills_.empty()) {
      slot = spills_++;
    } else {
      slot = free_spills_.back();
      free_spills_.pop_back();
    }
    slots_[v] = Slot{Slot::spill, slot};
    spilled_.push_back(v);
    emit(Code::spill, slots_[v]);
  }

  /// The current op's result, now in the accumulator; spill slots whose
  /// value the op read for the last time are free again.
  void produced(const TensorIr& t) {
    // Only the values in spill slots, not every value so far: that made
    // building a chain quadratic in its length (a 128-op chain of tiny adds
    // spent more here than in running).
    for (size_t i = 0; i < spilled_.size();) {
      const int v = spilled_[i];
      if (last_read_[v] == static_cast<int>(op_)) {
        free_spills_.push_back(slots_[v].index);
        slots_[v].kind = Slot::none;  // (read no more)
        spilled_[i] = spilled_.back();
        spilled_.pop_back();
      } else {
        ++i;
      }
    }
    accumulator_ = new_value(Slot{});
    last_read_[accumulator_] = last_reader(t.id);
    tensors_.emplace_back(t.id, accumulator_);
  }

  /// The index of the last op reading `id` (-1: none so far): open
  /// addressing over at most twice the ids a chain can name, so a lookup
  /// costs the same at any chain length.
  int& last_reader(TensorId id) {
    auto& slot = probe_id(readers_, id);
    if (slot.key == 0) {
      if (2 * ++readers_used_ > readers_.size()) {
        rehash(2 * readers_.size());
        return last_reader(id);
      }
      slot = {id.value, -1};
    }
    return slot.value;
  }

  void rehash(size_t capacity) {
    auto old = std::move(readers_);
    readers_.assign(capacity, IdSlot<int>{});
    readers_used_ = 0;
    for (const auto& slot : old)
      if (slot.key != 0) last_reader(TensorId{slot.key}) = slot.value;
  }

  int value(const TensorIr& t) const {
    for (auto it = tensors_.rbegin(); it != tensors_.rend(); ++it)
      if (it->first == t.id) return it->second;
    return -1;  // find_chain hands every input over: cannot happen
  }

  int new_value(Slot where) {
    slots_.push_back(where);
    last_read_.push_back(-1);
    return static_cast<int>(slots_.size()) - 1;
  }

  /// A constant's value; the same bits give the same value (a chain of
  /// scalar ops often repeats one).
  int constant(T v) {
    for (size_t c = 0; c < constants_.size(); ++c)
      // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bits on purpose: -0 and 0, NaN payloads differ
      if (std::memcmp(&constants_[c], &v, sizeof v) == 0) return constant_values_[c];
    constants_.push_back(v);
    constant_values_.push_back(new_value(Slot{Slot::constant, static_cast<int>(constants_.size()) - 1}));
    return constant_values_.back();
  }

  void emit(Code code, Slot operand) { code_.push_back({code, operand}); }

  /// The program, slots numbered inputs, constants, spills.
  vector_program::Program<T> finish(int inputs) const {
    vector_program::Program<T> program;
    program.inputs = inputs;
    program.constants = constants_;
    program.spills = spills_;
    const int constants = static_cast<int>(constants_.size());
    for (const auto& [code, slot] : code_) {
      int index = slot.index;
      if (slot.kind == Slot::constant) index += inputs;
      if (slot.kind == Slot::spill) index += inputs + constants;
      program.code.push_back({code, static_cast<uint8_t>(index)});
    }
    return program;
  }

  std::vector<Virtual> code_;
  std::vector<T> constants_;
  std::vector<int> constant_values_;               // by constant: its value
  std::vector<Slot> slots_;                        // by value
  std::vector<int> last_read_;                     // by value: index of the last op reading it
  std::vector<std::pair<TensorId, int>> tensors_;  // tensor -> value holding it
  std::vector<IdSlot<int>> readers_;               // tensor id -> index of the last op reading it
  size_t readers_used_ = 0;
  std::vector<int> free_spills_;
  std::vector<int> spilled_;  // values now in a spill slot
  int spills_ = 0;
  int accumulator_ = -1;
  size_t op_ = 0;
};

/// Runs the chain as a register program if it is one; false if not.
template <class T>
bool run_register_program(Context& ctx, std::span<OperationIr> chain, std::span<const TensorIr> inputs,
                          const Inputs& in, const TensorIr& out, std::byte* output) {
  std::vector<RegisterLoad<T>> loads;
  const auto program = RegisterProgramBuilder<T>().build(chain, inputs, in.bytes, out, loads);
  if (!program) return false;
  auto* result = reinterpret_cast<T*>(output);
  const int64_t n = out.numel();
  const int64_t tiles = (n + tile_elements - 1) / tile_elements;
  const auto banded = std::count_if(loads.begin(), loads.end(), [](const auto& l) { return l.band.has_value(); });
  ctx.pool.parallel_for(tiles, std::max<int64_t>(1, parallel_grain / tile_elements), [&](int64_t first, int64_t end) {
    const int64_t chunk_begin = first * tile_elements, chunk_end = std::min(n, end * tile_elements);
    std::array<const T*, vector_program::max_inputs> at{};
    if (banded == 0) {  // every input read in place: one run over the chunk
      for (size_t k = 0; k < loads.size(); ++k) at[k] = loads[k].data + chunk_begin;
      vector_program::run(*program, at.data(), result + chunk_begin, chunk_end - chunk_begin);
      return;
    }
    // Broadcast bands are gathered a tile at a time into scratch that
    // stays in cache, then read like the other inputs.
    auto scratch = std::make_unique_for_overwrite<T[]>(static_cast<size_t>(banded * tile_elements));
    for (int64_t begin = chunk_begin; begin < chunk_end; begin += tile_elements) {
      const int64_t count = std::min(tile_elements, chunk_end - begin);
      T* next = scratch.get();
      for (size_t k = 0; k < loads.size(); ++k) {
        if (!loads[k].band) {
          at[k] = loads[k].data + begin;
          continue;
        }
        gather_band(reinterpret_cast<const std::byte*>(loads[k].data), sizeof(T), *loads[k].band,
                    reinterpret_cast<std::byte*>(next), begin, count);
        at[k] = next;
        next += tile_elements;
      }
      vector_program::run(*program, at.data(), result + begin, count);
    }
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
