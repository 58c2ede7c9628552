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

/// What one instruction computes into register `out`. Registers a and b are
/// operands; for `load`, `a` is the index of the input read.
enum class Code : uint8_t {
  load,     // out = input[a][i]
  add,      // out = a + b
  sub,      // out = a - b
  mul,      // out = a * b
  div,      // out = a / b
  maximum,  // out = NaN if a or b is NaN, else a > b ? a : b
  minimum,  // out = NaN if a or b is NaN, else a < b ? a : b
  neg,      // out = 0 - a
  abs,      // out = a < 0 ? 0 - a : a
  relu,     // out = a > 0 or a is NaN ? a : 0
  sign,     // out = (0 < a) - (a < 0)
  floor,
  ceil,
  round,  // to nearest, ties to even (nearbyint)
  sqrt,
  rsqrt,       // out = 1 / sqrt(a)
  reciprocal,  // out = 1 / a
  clamp_low,   // out = a < b ? b : a  (NaN stays)
  clamp_high,  // out = a > b ? b : a  (NaN stays)
};

struct Instruction {
  Code code = Code::load;
  uint8_t out = 0;
  uint8_t a = 0;
  uint8_t b = 0;
};

/// Registers a program may use, constants included, and inputs it may load.
inline constexpr int max_registers = 16;
inline constexpr int max_inputs = 8;

/// A straight-line program: registers [0, constants.size()) hold the
/// constants throughout, the instructions run in order for each group of
/// elements, and register `result` is what is stored.
template <class T>
struct Program {
  std::vector<Instruction> code;
  std::vector<T> constants;
  int registers = 0;
  int inputs = 0;
  uint8_t result = 0;
};

/// out[i] = the program's result for element i of inputs[0..inputs), for i
/// in [0, n). `out` may be one of the inputs (each group of elements is
/// loaded before its results are stored).
void run(const Program<float>& program, const float* const* inputs, float* out, int64_t n);
void run(const Program<double>& program, const double* const* inputs, double* out, int64_t n);

}  // namespace switchyard::backends::cpu::vector_program
