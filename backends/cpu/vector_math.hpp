// SPDX-License-Identifier: Apache-2.0
#pragma once

// Row kernels of the softmax family on contiguous floats, vectorised with
// Highway (libhwy) and dispatched to the widest instruction set the CPU has
// when first called. libm's exp is scalar: a softmax over a row spent ~85%
// of its time in it.

#include <cstdint>

namespace switchyard::backends::cpu::vector_math {

/// The largest of x[0, n), n >= 1; NaN lanes may or may not win (the
/// callers' exp_sum turns a NaN row into NaN anyway).
float max(const float* x, int64_t n);
double max(const double* x, int64_t n);

/// y[i] = exp(x[i] - shift) for i in [0, n) and the sum of those values;
/// `y` may be `x`, or null to only sum. A NaN difference gives NaN (and so
/// a NaN sum); a difference of -inf gives 0. exp within 1 ulp (Highway's
/// Exp), the sum in the input's precision, lane by lane.
float exp_sum(const float* x, float shift, float* y, int64_t n);
double exp_sum(const double* x, double shift, double* y, int64_t n);

/// y[i] = x[i] * s (`y` may be `x`).
void scale(const float* x, float s, float* y, int64_t n);
void scale(const double* x, double s, double* y, int64_t n);

/// y[i] = (x[i] - a) - b (`y` may be `x`): log_softmax's x - max - log(sum),
/// in that order, exact where x is near a large max.
void subtract(const float* x, float a, float b, float* y, int64_t n);
void subtract(const double* x, double a, double b, double* y, int64_t n);

}  // namespace switchyard::backends::cpu::vector_math
