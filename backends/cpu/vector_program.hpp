// SPDX-License-Identifier: Apache-2.0
#pragma once

// Register programs: a fused element-wise chain whose every step is exact
// IEEE arithmetic (add, multiply, max, relu, sqrt, ...) on one float type,
// run as a short straight-line program over a few vectors at a time, so an
// element goes from its load through the whole chain to its store without a
// pass over a tile in between. The tiled chains of fused.cpp run each op
// over a tile in turn: the tile's loads from memory come in one burst and
// its stores in another, with cache-bound passes between them that the
// memory system sits out; here loads, arithmetic and stores interleave as
// in a loop fused by hand. Vectorised with Highway and dispatched to the
// widest instruction set the CPU has.
//
// Only operations whose vector form gives the same bits as the element
// functions of element_fns.hpp belong here (IEEE's correctly rounded + - *
// / and sqrt, comparisons and selections); libm functions (exp, tanh, ...)
// do not, and chains holding them stay tiled.

#include <cstdint>
#include <vector>

namespace switchyard::backends::cpu::vector_program {

/// What one instruction does. A program keeps one value, the accumulator,
/// in vector registers; an instruction's operand is one of the program's
/// slots: the inputs (element i of each), then the constants, then the
/// spill slots, which keep values a later op reads once the accumulator has
/// moved on.
enum class Code : uint8_t {
  load,   // acc = operand
  spill,  // operand (a spill slot) = acc
  // acc = acc op operand; the r- forms compute operand op acc.
  add,
  radd,
  sub,
  rsub,
  mul,
  rmul,
  div,
  rdiv,
  maximum,  // NaN if either is NaN, else x > y ? x : y
  rmaximum,
  minimum,  // NaN if either is NaN, else x < y ? x : y
  rminimum,
  clamp_low,   // acc < operand ? operand : acc  (NaN stays)
  clamp_high,  // acc > operand ? operand : acc  (NaN stays)
  // acc = f(acc)
  neg,   // 0 - acc
  abs,   // acc < 0 ? 0 - acc : acc
  relu,  // acc < 0 ? 0 : acc (NaN and -0 kept, as PyTorch's clamp_min)
  sign,  // (0 < acc) - (acc < 0)
  floor,
  ceil,
  round,  // to nearest, ties to even (nearbyint)
  sqrt,
  rsqrt,       // 1 / sqrt(acc)
  reciprocal,  // 1 / acc
};

struct Instruction {
  Code code = Code::load;
  uint8_t operand = 0;  // a slot index (unused by the unary codes)
};

/// Most inputs a program reads, and most constants and spill slots together.
inline constexpr int max_inputs = 8;
inline constexpr int max_registers = 32;

/// A straight-line program: slots [0, inputs) are the inputs, the next
/// constants.size() the constants, then `spills` spill slots. The
/// instructions run in order for each group of elements, starting with an
/// undefined accumulator (the first instruction is a load), and the
/// accumulator is stored at the end.
template <class T>
struct Program {
  std::vector<Instruction> code;
  std::vector<T> constants;
  int inputs = 0;
  int spills = 0;
};

/// out[i] = the program's result for element i of inputs[0..inputs), for i
/// in [0, n). `out` may be one of the inputs (each group of elements is
/// loaded before its results are stored).
void run(const Program<float>& program, const float* const* inputs, float* out, int64_t n);
void run(const Program<double>& program, const double* const* inputs, double* out, int64_t n);

}  // namespace switchyard::backends::cpu::vector_program
