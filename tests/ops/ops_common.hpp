// SPDX-License-Identifier: Apache-2.0
#pragma once

// Shared helpers of the op tests: one Runtime with every available device
// ({"cpu:0", "reference:0", "cuda:*"}), host data in any dtype, and
// comparisons that hold every device to the same values.

#include <functional>
#include <string>
#include <vector>

#include <switchyard/switchyard.hpp>

namespace sytest {

namespace sy = switchyard;

/// The runtime shared by the op tests (created on first use).
sy::Runtime& runtime();
/// Shuts the shared runtime down (main() calls it after the tests).
void close_runtime();
/// Every device of it: cpu:0, reference:0 and any GPUs.
std::vector<sy::Device> devices();
sy::Device reference();
/// cpu:0 of a second runtime with RuntimeOptions::fuse_elementwise off:
/// the property and PyTorch tests run there too, so fused chains and
/// op-by-op execution are both held to the same results.
sy::Device unfused_cpu();
/// devices(), then unfused_cpu().
std::vector<sy::Device> devices_fused_and_unfused();
/// The device's name in messages ("cpu:0 (fusion off)" for unfused_cpu()).
std::string label(const sy::Device& d);

/// Allowed difference between floating results: |got - want| <= atol + rtol * |want|.
struct Tol {
  double rtol = 0;
  double atol = 0;
};
/// Rounding-level tolerance for the dtype (0 for integers and bool).
Tol tol_for(sy::DType t);

/// Host data of dtype `t` from doubles (converted as a cast would).
sy::TensorData data(sy::DType t, sy::Shape s, const std::vector<double>& v);
sy::Tensor make(const sy::Device& d, sy::DType t, sy::Shape s, const std::vector<double>& v);

/// Empty when `got` matches `want` (shape, dtype, values; NaN matches NaN,
/// infinities must match exactly); otherwise what differs.
std::string compare(const sy::TensorData& got, const sy::TensorData& want, Tol tol);

using Build = std::function<sy::Tensor(const sy::Device&)>;

/// Runs `build` on every device and checks each result against `want`.
void expect_all(const Build& build, const sy::TensorData& want, Tol tol);
void expect_all(const Build& build, sy::DType t, sy::Shape s, const std::vector<double>& want);
/// Runs `build` on every device and checks each against the reference device.
sy::TensorData agree(const Build& build, std::optional<Tol> tol = std::nullopt);
/// Whether `d` documents f16, bf16, i8 or i16 as unsupported (cuda for now).
bool lacks_narrow_dtypes(const sy::Device& d);
/// build(d) read back; nothing (and a warning, once per device) when `d`
/// refuses a dtype it documents as unsupported. Other errors propagate.
std::optional<sy::TensorData> run_on(const Build& build, const sy::Device& d);
/// `build` fails on every device with `code`: at the call or when read.
void expect_error(const Build& build, sy::Errc code);

}  // namespace sytest
