// SPDX-License-Identifier: Apache-2.0
// Property test: random op graphs (random shapes with size-0 and size-1
// axes, broadcasting, random dtypes) built through the client API give the
// same results on every device as on the reference backend.
//
// Tolerance: integers and bool exactly; f32 within rtol 1e-4 + atol 1e-4,
// f64 within 1e-9 (the ops chosen keep values bounded, so rounding
// differences stay at that scale). Ops whose result is discontinuous in a
// floating input (comparisons, float-to-int casts, floor) only take integer
// inputs, so a rounding difference cannot flip a result. 60 graphs of 8 ops:
// well under a few seconds. The cpu device runs them twice, with fusion of
// element-wise chains on (the shared runtime) and off (unfused_cpu()).

#include <catch2/catch.hpp>
#include <random>

#include <switchyard/nn.hpp>

#include "ops_common.hpp"
#include "switchyard/nn.hpp"

using namespace sytest;
using sy::Device;
using sy::DType;
using sy::Tensor;

namespace {

using Rng = std::mt19937_64;

int64_t pick(Rng& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

sy::Shape random_shape(Rng& rng) {
  sy::Shape s;
  const int64_t rank = pick(rng, 0, 3);
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t r = pick(rng, 0, 9);
    s.dims.push_back(r == 0 ? 0 : r < 4 ? 1 : pick(rng, 2, 4));  // size-0 and size-1 axes are common
  }
  return s;
}

sy::TensorData leaf_data(Rng& rng, DType t, const sy::Shape& s) {
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) {
    if (sy::is_floating(t))
      x = static_cast<double>(pick(rng, -200, 200)) / 100;
    else if (t == DType::boolean)
      x = static_cast<double>(pick(rng, 0, 1));
    else if (t == DType::u8)
      x = static_cast<double>(pick(rng, 0, 255));
    else
      x = static_cast<double>(pick(rng, -50, 50));
  }
  return data(t, s, v);
}

/// One step of a graph: reads earlier tensors, returns a new one (may throw
/// sy::Error at the call, which the generator treats as "not applicable").
using Step = std::function<Tensor(const std::vector<Tensor>&)>;

Step random_step(Rng& rng, size_t available) {
  const size_t i = static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(available) - 1));
  const size_t j = static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(available) - 1));
  const int64_t axis = pick(rng, -2, 1);
  const auto dt = sy::all_dtypes[pick(rng, 0, static_cast<int64_t>(std::size(sy::all_dtypes)) - 1)];
  const int64_t which = pick(rng, 0, 29);
  auto floating = [](const Tensor& t) { return sy::is_floating(t.dtype()); };
  return [=](const std::vector<Tensor>& ts) -> Tensor {
    const Tensor& a = ts[i];
    const Tensor& b = ts[j];
    switch (which) {
      case 0:
        return a + b;
      case 1:
        return a * b;
      case 2:
        return a.maximum(b);
      case 3:
        return a.sub(b);
      case 4:
        return a.tanh();
      case 5:
        return a.abs().neg();
      case 6:
        return a.sum({axis}, axis % 2 == 0);
      case 7:
        return a.max({axis});
      case 8:
        return floating(a) ? a.softmax(axis) : a.cast(DType::f32).softmax(axis);
      case 9:
        return a.rank() >= 2 && b.rank() >= 1 ? a.matmul(b) : a.mT();
      case 10:
        if (floating(a) && !sy::is_floating(dt)) throw sy::Error(sy::Errc::invalid_argument, "skip");
        return a.cast(dt);
      case 11:
        return a.rank() >= 2 ? a.transpose(0, -1) : a.unsqueeze(0);
      case 12:
        return a.flip({axis});
      case 13:
        return a.slice(axis, {1, std::numeric_limits<int64_t>::max(), 2});
      case 14:
        return sy::cat({a, b}, axis);
      case 15:
        if (floating(a)) throw sy::Error(sy::Errc::invalid_argument, "skip");
        return sy::where(a.gt(b), a, b);
      case 16:
        return a.rank() < 2 ? a.expand(sy::Shape{2, a.numel()}).flatten() : a.reshape({-1});
      case 17:
        return a * 0.5 + 1;
      case 18:
        return a.mean({axis}, true);
      case 27:
        return a.cumsum(axis);
      case 28:  // integers only: a rounding difference must not reorder floats
        if (floating(a)) throw sy::Error(sy::Errc::invalid_argument, "skip");
        return a.argsort(axis, axis % 2 == 0);
      case 29:
        if (!floating(a) || a.rank() == 0) throw sy::Error(sy::Errc::invalid_argument, "skip");
        return sy::nn::layer_norm(a, {a.shape().dims.back()});
      case 25: {
        // conv1d of a (C, L) or (N, C, L) float tensor with a weight cut from its own values.
        if (!floating(a) || a.rank() < 2) throw sy::Error(sy::Errc::invalid_argument, "skip");
        auto w = a.rank() == 2 ? a.unsqueeze(0) : a.slice(0, {0, 1});
        w = w.slice(-1, {0, std::min<int64_t>(2, a.shape().dims.back())});
        return sy::nn::conv1d(a, w, {}, 1, 1);
      }
      case 26:
        if (!floating(a) || a.rank() < 2) throw sy::Error(sy::Errc::invalid_argument, "skip");
        return axis % 2 == 0 ? sy::nn::max_pool1d(a, 2, 1, 1) : sy::nn::avg_pool1d(a, 2, 1, 1, true, false);
      case 19:
        return a.pad(std::vector<int64_t>(a.rank(), 1), std::vector<int64_t>(a.rank(), 0), 2);
      case 20:  // integer operands only (floor is discontinuous), a divisor that is never 0
        if (floating(a) || floating(b)) throw sy::Error(sy::Errc::invalid_argument, "skip");
        return a.floor_divide(b.abs().cast(DType::i64) + 1);
      case 21:
        return a.tril(axis);
      case 22:
        return a.rank() == 0 ? a.roll(int64_t{axis}) : a.roll(axis + 3, axis);
      case 23:
        return a.repeat(std::vector<int64_t>(a.rank(), 2));
      default:
        if (!floating(a)) throw sy::Error(sy::Errc::invalid_argument, "skip");
        return sy::nn::pad(a, {1, 0}, a.rank() >= 3 ? "replicate" : "reflect");
    }
  };
}

}  // namespace

TEST_CASE("random op graphs agree with the reference backend on every device with fusion on and off",
          "[ops][property]") {
  int checked = 0;
  for (uint64_t graph = 0; graph < 60; ++graph) {
    Rng rng(0x5eed0000 + graph);
    std::vector<sy::TensorData> leaves;
    const auto base = random_shape(rng);
    for (int k = 0; k < 3; ++k) {
      // Leaves share a broadcastable base: either the base, a suffix of it, or it with an axis set to 1.
      sy::Shape s = base;
      const int64_t mode = pick(rng, 0, 2);
      if (mode == 1 && s.rank() > 0) s.dims.erase(s.dims.begin());
      if (mode == 2 && s.rank() > 0) s.dims[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(s.rank()) - 1))] = 1;
      leaves.push_back(
          leaf_data(rng, sy::all_dtypes[pick(rng, 0, static_cast<int64_t>(std::size(sy::all_dtypes)) - 1)], s));
    }
    // Generate on the reference device: keep the steps the rules accept.
    std::vector<Step> steps;
    std::vector<Tensor> ref;
    for (const auto& l : leaves) ref.push_back(reference().from_data(l));
    for (int attempt = 0; attempt < 40 && steps.size() < 8; ++attempt) {
      auto step = random_step(rng, ref.size());
      try {
        ref.push_back(step(ref));
        steps.push_back(step);
      } catch (const sy::Error&) {
      }
    }
    const bool narrow = std::any_of(ref.begin(), ref.end(), [](const Tensor& t) {
      return sy::is_half(t.dtype()) || t.dtype() == DType::i8 || t.dtype() == DType::i16;
    });
    for (const auto& d : devices_fused_and_unfused()) {
      if (d == reference()) continue;
      if (narrow && lacks_narrow_dtypes(d)) continue;  // documented as unsupported, refused at the call
      std::vector<Tensor> ts;
      for (const auto& l : leaves) ts.push_back(d.from_data(l));
      for (const auto& s : steps) ts.push_back(s(ts));
      for (size_t k = leaves.size(); k < ts.size(); ++k) {
        auto want = ref[k].read().get();
        auto got = ts[k].read().get();
        // The 16-bit floats: cpu rounds once from f32, the reference from
        // double through float, so steps may differ by an ulp, which later
        // steps (a difference of near-equal values) can magnify.
        Tol tol = want.dtype == DType::f32    ? Tol{1e-4, 1e-4}
                  : want.dtype == DType::f64  ? Tol{1e-9, 1e-9}
                  : want.dtype == DType::f16  ? Tol{1e-2, 5e-2}
                  : want.dtype == DType::bf16 ? Tol{5e-2, 0.25}
                                              : Tol{};
        INFO("graph " << graph << " step " << k - leaves.size() << " on " << label(d) << ": " << want.shape.to_string()
                      << " " << sy::name_of(want.dtype));
        CHECK(compare(got, want, tol) == "");
        ++checked;
      }
    }
  }
  CHECK(checked >= 300);
  // The "fusion on" half is no formality: chains such as a * 0.5 + 1 fused.
  auto stats = runtime().device("cpu:0").stats();
  REQUIRE(stats.wait_for(std::chrono::seconds(60)));
  CHECK(stats.get().ops_fused > 0);
}
