// SPDX-License-Identifier: Apache-2.0
// The index math every CUDA kernel uses (make_layout + kern::offsets), run
// on the host: it needs the CUDA headers but no GPU, so it runs everywhere
// the CUDA backend is built.

#include <catch2/catch.hpp>
#include <random>

#include "backends/cuda/layout_plan.hpp"
#include "switchyard/messages/shape.hpp"

using switchyard::backends::cuda::make_layout;
namespace kern = switchyard::backends::cuda::kern;

namespace {

// Offset of flat index i by the definition: row-major coordinates times strides.
int64_t direct(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t i) {
  int64_t off = 0;
  for (size_t d = dims.size(); d-- > 0;) {
    off += (i % dims[d]) * strides[d];
    i /= dims[d];
  }
  return off;
}

}  // namespace

TEST_CASE("cuda layouts: merged offsets equal the strided formula for random shapes and strides", "[cuda][layout]") {
  std::mt19937 gen(42);
  for (int trial = 0; trial < 500; ++trial) {
    const int rank = std::uniform_int_distribution<int>(0, 6)(gen);
    std::vector<int64_t> dims(rank);
    for (auto& d : dims) d = std::uniform_int_distribution<int>(1, 4)(gen);
    // Operand 0 contiguous (merges), operand 1 random (zero and negative strides too).
    std::vector<int64_t> s0 = switchyard::Shape(dims).strides(), s1(rank);
    for (auto& s : s1) s = std::uniform_int_distribution<int>(-5, 5)(gen);
    if (trial % 3 == 0) s1 = s0;  // both contiguous: collapses to rank <= 1
    auto l = make_layout<2>(dims, {s0, s1});
    REQUIRE(l.rank <= rank);
    const int64_t n = switchyard::Shape(dims).numel();
    for (int64_t i = 0; i < n; ++i) {
      int64_t off[2];
      kern::offsets(l, i, off);
      INFO("trial " << trial << " index " << i);
      REQUIRE(off[0] == direct(dims, s0, i));
      REQUIRE(off[1] == direct(dims, s1, i));
    }
    if (trial % 3 == 0 && n > 1) CHECK(l.rank == 1);
  }
}

TEST_CASE("cuda layouts: broadcast strides give the broadcast element of each operand", "[cuda][layout]") {
  switchyard::Shape a{3, 1, 5}, b{4, 1}, out{3, 4, 5};
  auto l = make_layout<2>(out.dims, {switchyard::broadcast_strides(a, out), switchyard::broadcast_strides(b, out)});
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t x = i / 20, y = (i / 5) % 4, z = i % 5;
    int64_t off[2];
    kern::offsets(l, i, off);
    REQUIRE(off[0] == x * 5 + z);
    REQUIRE(off[1] == y);
  }
}

TEST_CASE("cuda layouts: a rank-0 layout maps its one element to offset 0", "[cuda][layout]") {
  auto l = make_layout<1>({}, {std::vector<int64_t>{}});
  CHECK(l.rank == 0);
  int64_t off[1] = {99};
  kern::offsets(l, 0, off);
  CHECK(off[0] == 0);
  auto ones = make_layout<1>({1, 1, 1}, {std::vector<int64_t>{1, 1, 1}});
  CHECK(ones.rank == 0);
}
