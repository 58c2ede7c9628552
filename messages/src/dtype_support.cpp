// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/dtype_support.hpp"

namespace switchyard {

namespace {

DTypeSupport table(std::string_view kind, DType t) {
  if (!is_valid(t)) return {};
  if (kind == "cpu") {
    if (is_half(t))
      return {true, true, true,
              "stored in 2 bytes; computed in f32 with one rounding to " + std::string(name_of(t)) +
                  " per op (reductions accumulate in f32), as PyTorch's CPU" +
                  (t == DType::bf16 ? std::string("; matmul on AVX512-BF16 dot products (f32 accumulation) where the "
                                                  "CPU has them")
                                    : std::string())};
    return {true, true, true, "native"};
  }
  if (kind == "reference") {
    if (is_floating(t) || is_integral(t) || is_bool(t))
      return {true, true, true,
              is_half(t) ? "computed in double, rounded to " + std::string(name_of(t)) + " after each op"
                         : "computed in double or int64, stored as " + std::string(name_of(t))};
  }
  if (kind == "cuda") {
    if (is_half(t))
      return {true, true, true,
              "stored as " + std::string(t == DType::f16 ? "__half" : "__nv_bfloat16") +
                  " in 2 bytes; computed in f32 with one rounding to " + std::string(name_of(t)) +
                  " per op (reductions, scans, norms and softmax accumulate in f32 or wider), as the cpu; "
                  "matmul on tensor cores through cuBLAS with f32 accumulation"};
    return {true, true, true, "native"};
  }
  return {};
}

}  // namespace

DTypeSupport dtype_support(std::string_view kind, DType t) {
  DTypeSupport s = table(kind, t);
  if (is_bool(t)) s.matmul = false;  // matmul's rule refuses bool everywhere
  return s;
}

}  // namespace switchyard
