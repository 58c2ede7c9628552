// SPDX-License-Identifier: Apache-2.0
#include "ops_common.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <set>
#include <sstream>

namespace sytest {

namespace {
// Created on first use and closed by main() before static destruction:
// tearing down an actor system from a static destructor, after other
// statics are gone, corrupts the heap.
std::unique_ptr<sy::Runtime>& runtime_slot() {
  static std::unique_ptr<sy::Runtime> rt;
  return rt;
}
std::unique_ptr<sy::Runtime>& unfused_runtime_slot() {
  static std::unique_ptr<sy::Runtime> rt;
  return rt;
}
}  // namespace

sy::Runtime& runtime() {
  auto& rt = runtime_slot();
  if (!rt) rt = std::make_unique<sy::Runtime>(sy::RuntimeOptions{.devices = {"cpu:0", "reference:0", "cuda:*"}});
  return *rt;
}

void close_runtime() {
  unfused_runtime_slot().reset();
  runtime_slot().reset();
}

std::vector<sy::Device> devices() { return runtime().devices(); }
sy::Device reference() { return runtime().device("reference:0"); }

sy::Device unfused_cpu() {
  auto& rt = unfused_runtime_slot();
  if (!rt) rt = std::make_unique<sy::Runtime>(sy::RuntimeOptions{.devices = {"cpu:0"}, .fuse_elementwise = false});
  return rt->device("cpu:0");
}

std::vector<sy::Device> devices_fused_and_unfused() {
  auto all = devices();
  all.push_back(unfused_cpu());
  return all;
}

std::string label(const sy::Device& d) { return d == unfused_cpu() ? d.name() + " (fusion off)" : d.name(); }

Tol tol_for(sy::DType t) {
  switch (t) {
    case sy::DType::f32:
      return {2e-5, 1e-6};
    case sy::DType::f64:
      return {1e-12, 1e-14};
    // About two units in the last place: devices round once from f32
    // (cpu) or from double through float (reference).
    case sy::DType::f16:
      return {2e-3, 1e-3};
    case sy::DType::bf16:
      return {1.6e-2, 1e-2};
    default:
      return {0, 0};
  }
}

sy::TensorData data(sy::DType t, sy::Shape s, const std::vector<double>& v) {
  auto bytes = sy::Bytes::allocate(v.size() * sy::size_of(t));
  sy::visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    auto* p = bytes.mutable_as<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>)
        reinterpret_cast<uint8_t*>(p)[i] = v[i] != 0;
      else
        p[i] = static_cast<T>(v[i]);
    }
  });
  return sy::TensorData(std::move(s), t, std::move(bytes));
}

sy::Tensor make(const sy::Device& d, sy::DType t, sy::Shape s, const std::vector<double>& v) {
  return d.from_data(data(t, std::move(s), v));
}

namespace {
// Integers compared exactly as int64 (doubles lose precision past 2^53).
int64_t int_at(const sy::TensorData& d, int64_t i) {
  return sy::visit_dtype(d.dtype, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (sy::is_float_like_v<T>)
      return 0;
    else
      return static_cast<int64_t>(d.bytes.as<const T>()[i]);
  });
}
}  // namespace

std::string compare(const sy::TensorData& got, const sy::TensorData& want, Tol tol) {
  std::ostringstream out;
  if (got.shape != want.shape || got.dtype != want.dtype) {
    out << "got " << got.shape.to_string() << " " << sy::name_of(got.dtype) << ", want " << want.shape.to_string()
        << " " << sy::name_of(want.dtype);
    return out.str();
  }
  int shown = 0;
  for (int64_t i = 0; i < got.numel() && shown < 5; ++i) {
    bool ok;
    double g = got.at(i), w = want.at(i);
    if (sy::is_floating(got.dtype)) {
      if (std::isnan(w))
        ok = std::isnan(g);
      else if (std::isinf(w))
        ok = g == w;
      else
        ok = std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w);
    } else {
      ok = int_at(got, i) == int_at(want, i);
    }
    if (!ok) {
      out.precision(17);
      out << "element " << i << ": got " << g << ", want " << w << "; ";
      ++shown;
    }
  }
  return out.str();
}

bool lacks_narrow_dtypes(const sy::Device& d) {
  for (auto t : {sy::DType::f16, sy::DType::bf16, sy::DType::i8, sy::DType::i16})
    if (!d.dtype_support(t).storage) return true;
  return false;
}

namespace {
// Every read of the op tests is bounded: a hang fails its case, not the run.
sy::TensorData read_bounded(const sy::Tensor& t) {
  auto f = t.read();
  if (!f.wait_for(std::chrono::seconds(120))) FAIL("no result within 120 s");
  return f.get();
}
}  // namespace

std::optional<sy::TensorData> run_on(const Build& build, const sy::Device& d) {
  try {
    return read_bounded(build(d));
  } catch (const sy::Error& e) {
    // A device that documents a dtype as unsupported (none of the built-in
    // backends today) refuses it at the call: skipped there, with the reason once.
    if (e.code() != sy::Errc::unsupported || !lacks_narrow_dtypes(d)) throw;
    static std::set<std::string> told;
    if (told.insert(d.name()).second)
      WARN("skipping cases on " << d.name() << " that use a dtype it does not support: " << e.what());
    return std::nullopt;
  }
}

void expect_all(const Build& build, const sy::TensorData& want, Tol tol) {
  for (const auto& d : devices()) {
    INFO("device " << d.name());
    auto got = run_on(build, d);
    if (got) CHECK(compare(*got, want, tol) == "");
  }
}

void expect_all(const Build& build, sy::DType t, sy::Shape s, const std::vector<double>& want) {
  expect_all(build, data(t, std::move(s), want), tol_for(t));
}

sy::TensorData agree(const Build& build, std::optional<Tol> tol) {
  auto want = read_bounded(build(reference()));
  for (const auto& d : devices()) {
    if (d == reference()) continue;
    INFO("device " << d.name() << " against reference:0");
    auto got = run_on(build, d);
    if (got) CHECK(compare(*got, want, tol ? *tol : tol_for(want.dtype)) == "");
  }
  return want;
}

void expect_error(const Build& build, sy::Errc code) {
  for (const auto& d : devices()) {
    INFO("device " << d.name());
    try {
      auto t = build(d);
      (void)read_bounded(t);
      FAIL("no error");
    } catch (const sy::Error& e) {
      INFO(e.what());
      CHECK(e.code() == code);
    }
  }
}

}  // namespace sytest
