// SPDX-License-Identifier: Apache-2.0
// Layout ops (views, slices, cat/stack, pad, index family), creation ops,
// random streams and dtype-faithful bridges on every device.

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <limits>

#include "ops_common.hpp"

using namespace sytest;
using sy::Device;
using sy::DType;
using sy::Slice;
using sy::Tensor;

namespace {
// [2,3,4] holding 0..23.
Tensor cube(const Device& d, DType t = DType::i64) { return d.arange(0, 24, 1, t).reshape({2, 3, 4}); }
}  // namespace

TEST_CASE("reshape, flatten, squeeze and unsqueeze keep the element order", "[ops][layout]") {
  expect_all(
      [](const Device& d) {
        return cube(d).reshape({4, -1});
      },
      DType::i64, {4, 6}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  expect_all([](const Device& d) { return cube(d).flatten().slice(0, {20}); }, DType::i64, {4}, {20, 21, 22, 23});
  expect_all([](const Device& d) { return make(d, DType::f32, {1, 2, 1}, {5, 6}).squeeze(); }, DType::f32, {2}, {5, 6});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {1, 2, 1}, {5, 6}).squeeze(-1);
      },
      DType::f32, {1, 2}, {5, 6});
  expect_all([](const Device& d) { return make(d, DType::f32, {2}, {5, 6}).unsqueeze(1); }, DType::f32, {2, 1}, {5, 6});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {2}, {5, 6}).unsqueeze(-1).unsqueeze(0);
      },
      DType::f32, {1, 2, 1}, {5, 6});
  expect_all([](const Device& d) { return make(d, DType::f32, {0, 3}, {}).reshape({3, 0}); }, DType::f32, {3, 0}, {});
  CHECK_THROWS_AS(cube(reference()).reshape({5, -1}), sy::Error);
  CHECK_THROWS_AS(cube(reference()).reshape({-1, -1}), sy::Error);
}

TEST_CASE("permute, transpose and mT reorder axes", "[ops][layout]") {
  // out[k][i][j] = cube[i][j][k] = 12 i + 4 j + k
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(12 * i + 4 * j + k);
  expect_all([](const Device& d) { return cube(d).permute({2, 0, 1}); }, DType::i64, {4, 2, 3}, want);
  expect_all(
      [](const Device& d) {
        return make(d, DType::u8, {2, 3}, {1, 2, 3, 4, 5, 6}).transpose(0, 1);
      },
      DType::u8, {3, 2}, {1, 4, 2, 5, 3, 6});
  expect_all(
      [](const Device& d) {
        return make(d, DType::boolean, {1, 2, 2}, {1, 0, 0, 0}).mT();
      },
      DType::boolean, {1, 2, 2}, {1, 0, 0, 0});
  CHECK_THROWS_AS(cube(reference()).permute({0, 0, 1}), sy::Error);
  CHECK_THROWS_AS(cube(reference()).permute({0, 1}), sy::Error);
}

TEST_CASE("a transpose that moves only axes of extent 1 keeps the order and its input", "[ops][layout]") {
  // [1, 2, 3] -> [2, 1, 3]: read in order (the cpu backend shares the block);
  // ops on the result must not reach the input.
  expect_all(
      [](const Device& d) {
        auto x = make(d, DType::f32, {1, 2, 3}, {1, 2, 3, 4, 5, 6});
        auto t = x.transpose(0, 1) * 10.0;
        return sy::cat({x.reshape({2, 1, 3}), t}, 1);
      },
      DType::f32, {2, 2, 3}, {1, 2, 3, 10, 20, 30, 4, 5, 6, 40, 50, 60});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {2, 1, 2}, {1, 2, 3, 4}).permute({1, 0, 2});
      },
      DType::i32, {1, 2, 2}, {1, 2, 3, 4});
}

TEST_CASE("expand broadcasts with zero strides", "[ops][layout]") {
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {2, 1}, {1, 2}).expand({2, 2, 3});
      },
      DType::i32, {2, 2, 3}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {2, 1}, {1, 2}).expand({-1, 2});
      },
      DType::i32, {2, 2}, {1, 1, 2, 2});
  expect_all([](const Device& d) { return make(d, DType::i32, {1}, {7}).expand({0}); }, DType::i32, {0}, {});
  CHECK_THROWS_AS(make(reference(), DType::i32, {2}, {1, 2}).expand({3}), sy::Error);
}

TEST_CASE("flip reverses axes", "[ops][layout]") {
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {2, 3}, {1, 2, 3, 4, 5, 6}).flip({1});
      },
      DType::f64, {2, 3}, {3, 2, 1, 6, 5, 4});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {2, 3}, {1, 2, 3, 4, 5, 6}).flip({0, -1});
      },
      DType::f64, {2, 3}, {6, 5, 4, 3, 2, 1});
  expect_all([](const Device& d) { return make(d, DType::f64, {0, 3}, {}).flip({0}); }, DType::f64, {0, 3}, {});
}

TEST_CASE("stepped slices follow Python's bounds", "[ops][layout][slice]") {
  auto r = [](const Device& d) { return d.arange(0, 10); };
  expect_all([&](const Device& d) { return r(d).slice(0, {1, 8, 3}); }, DType::i64, {3}, {1, 4, 7});
  expect_all([&](const Device& d) { return r(d).slice(0, {-3}); }, DType::i64, {3}, {7, 8, 9});
  expect_all([&](const Device& d) { return r(d).slice(0, {2, -5, 2}); }, DType::i64, {2}, {2, 4});
  expect_all([&](const Device& d) { return r(d).slice(0, {8, 100}); }, DType::i64, {2}, {8, 9});
  expect_all([&](const Device& d) { return r(d).slice(0, {7, 3}); }, DType::i64, {0}, {});
  expect_all(
      [](const Device& d) {
        return cube(d).slice({Slice{1}, Slice{0, 3, 2}});
      },
      DType::i64, {1, 2, 4}, {12, 13, 14, 15, 20, 21, 22, 23});
  expect_all(
      [](const Device& d) {
        return cube(d).slice(2, {1, 4, 2});
      },
      DType::i64, {2, 3, 2}, {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  CHECK_THROWS_AS(r(reference()).slice(0, {0, 5, 0}), sy::Error);
  CHECK_THROWS_AS(r(reference()).slice(0, {0, 5, -1}), sy::Error);
}

TEST_CASE("slice_assign replaces a strided region, broadcasting and casting the value", "[ops][layout][slice]") {
  expect_all(
      [](const Device& d) {
        return d.zeros({3, 4}, DType::i32)
            .slice_assign({Slice{0, 3, 2}, Slice{1, 3}}, make(d, DType::i32, {2, 2}, {1, 2, 3, 4}));
      },
      DType::i32, {3, 4}, {0, 1, 2, 0, 0, 0, 0, 0, 0, 3, 4, 0});
  expect_all(
      [](const Device& d) {
        return d.zeros({2, 3}).slice_assign({Slice{}, Slice{2}}, make(d, DType::i64, {}, {7}));
      },
      DType::f32, {2, 3}, {0, 0, 7, 0, 0, 7});
  expect_all(
      [](const Device& d) {
        return d.ones({2}).slice_assign({Slice{1, 1}}, make(d, DType::f32, {0}, {}));
      },
      DType::f32, {2}, {1, 1});
  CHECK_THROWS_AS(reference().zeros({3}).slice_assign({Slice{0, 2}}, make(reference(), DType::f32, {3}, {1, 2, 3})),
                  sy::Error);
}

TEST_CASE("cat and stack join tensors, promoting dtypes", "[ops][layout][cat]") {
  expect_all(
      [](const Device& d) {
        return sy::cat({make(d, DType::i32, {1, 2}, {1, 2}), make(d, DType::i32, {2, 2}, {3, 4, 5, 6})}, 0);
      },
      DType::i32, {3, 2}, {1, 2, 3, 4, 5, 6});
  expect_all(
      [](const Device& d) {
        return sy::cat({make(d, DType::i32, {2, 1}, {1, 2}), make(d, DType::f32, {2, 2}, {3, 4, 5, 6})}, -1);
      },
      DType::f32, {2, 3}, {1, 3, 4, 2, 5, 6});
  expect_all(
      [](const Device& d) {
        return sy::cat({make(d, DType::u8, {0, 2}, {}), make(d, DType::u8, {1, 2}, {9, 8})});
      },
      DType::u8, {1, 2}, {9, 8});
  expect_all(
      [](const Device& d) {
        return sy::stack({make(d, DType::boolean, {2}, {1, 0}), make(d, DType::boolean, {2}, {0, 0})}, 1);
      },
      DType::boolean, {2, 2}, {1, 0, 0, 0});
  expect_all(
      [](const Device& d) {
        return sy::stack({make(d, DType::f64, {2}, {1, 2}), make(d, DType::f64, {2}, {3, 4})});
      },
      DType::f64, {2, 2}, {1, 2, 3, 4});
  auto r = reference();
  CHECK_THROWS_AS(sy::cat({make(r, DType::i32, {1, 2}, {1, 2}), make(r, DType::i32, {1, 3}, {1, 2, 3})}, 0), sy::Error);
  CHECK_THROWS_AS(sy::stack({make(r, DType::i32, {2}, {1, 2}), make(r, DType::i32, {3}, {1, 2, 3})}), sy::Error);
  CHECK_THROWS_AS(sy::cat({}), sy::Error);
}

TEST_CASE("pad adds constant borders", "[ops][layout][pad]") {
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {1, 2}, {1, 2}).pad({1, 0}, {0, 2}, -1);
      },
      DType::i32, {2, 4}, {-1, -1, -1, -1, 1, 2, -1, -1});
  expect_all([](const Device& d) { return make(d, DType::f32, {0}, {}).pad({1}, {1}, 2.5); }, DType::f32, {2},
             {2.5, 2.5});
  // Negative widths crop, as F.pad; an extent below zero is refused.
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {3}, {1, 2, 3}).pad({-1}, {2}, 9);
      },
      DType::i32, {4}, {2, 3, 9, 9});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {3}, {1, 2, 3}).pad({2}, {-3}, 9);
      },
      DType::i32, {2}, {9, 9});
  CHECK_THROWS_AS(make(reference(), DType::i32, {2}, {1, 2}).pad({-3}, {0}), sy::Error);
  CHECK_THROWS_AS(make(reference(), DType::i32, {3}, {1, 2, 3}).pad({2}, {-4}), sy::Error);  // crops 4 of 3
  CHECK_THROWS_AS(make(reference(), DType::i32, {3}, {1, 2, 3}).pad({std::numeric_limits<int64_t>::min()}, {0}),
                  sy::Error);
  CHECK_THROWS_AS(make(reference(), DType::i32, {2}, {1, 2}).pad({1, 1}, {0, 0}), sy::Error);
}

TEST_CASE("gather, scatter_add and index_select follow PyTorch", "[ops][layout][index]") {
  auto x = [](const Device& d) { return make(d, DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}); };
  auto idx = [](const Device& d) { return make(d, DType::i64, {2, 2}, {2, 0, 1, 1}); };
  // out[i][j] = x[i][idx[i][j]]
  expect_all([&](const Device& d) { return x(d).gather(1, idx(d)); }, DType::f32, {2, 2}, {3, 1, 5, 5});
  // out[idx[i][j]][j] = x[idx[i][j]][j] along axis 0
  expect_all(
      [&](const Device& d) {
        return x(d).gather(0, make(d, DType::i32, {1, 3}, {1, 0, 1}));
      },
      DType::f32, {1, 3}, {4, 2, 6});
  // out = zeros; out[i][idx[i][j]] += src[i][j]
  expect_all(
      [&](const Device& d) {
        return d.zeros({2, 3}).scatter_add(1, idx(d), make(d, DType::f32, {2, 2}, {1, 2, 3, 4}));
      },
      DType::f32, {2, 3}, {2, 0, 1, 0, 7, 0});
  expect_all(
      [&](const Device& d) {
        return d.zeros({3}, DType::i64)
            .scatter_add(0, make(d, DType::i64, {4}, {0, 2, 0, 0}), make(d, DType::i64, {5}, {1, 1, 1, 1, 9}));
      },
      DType::i64, {3}, {3, 0, 1});
  expect_all(
      [&](const Device& d) {
        return x(d).index_select(1, make(d, DType::i64, {3}, {2, 2, 0}));
      },
      DType::f32, {2, 3}, {3, 3, 1, 6, 6, 4});
  expect_all([&](const Device& d) { return x(d).index_select(0, make(d, DType::i32, {1}, {1})); }, DType::f32, {1, 3},
             {4, 5, 6});
  expect_all([&](const Device& d) { return x(d).index_select(0, make(d, DType::i64, {0}, {})); }, DType::f32, {0, 3},
             {});
  // Negative indices count from the end (PyTorch rejects them; we accept them like Python sequences).
  expect_all([&](const Device& d) { return x(d).index_select(1, make(d, DType::i64, {1}, {-1})); }, DType::f32, {2, 1},
             {3, 6});
}

TEST_CASE("scatter_add on bool is a logical or", "[ops][layout][index]") {
  expect_all(
      [](const Device& d) {
        return make(d, DType::boolean, {3}, {1, 0, 0})
            .scatter_add(0, make(d, DType::i64, {3}, {0, 1, 1}), make(d, DType::boolean, {3}, {1, 1, 1}));
      },
      DType::boolean, {3}, {1, 1, 0});
}

TEST_CASE("index_select of a 0-d input gives a 0-d result", "[ops][layout][index]") {
  // Regression: the CPU backend wrote one element per index into the one-element output
  // (a heap overflow that the ASan build reports; the values alone may look right).
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {}, {5}).index_select(0, make(d, DType::i64, {3}, {0, -1, 0}));
      },
      DType::f64, {}, {5});
}

TEST_CASE("gather and scatters take a 1-D index into a 0-d input as PyTorch 1.13", "[ops][layout][index]") {
  // torch.gather(tensor(3.5), 0, zeros(2)) is [3.5, 3.5]; the scatters keep the input's 0-d shape:
  // scatter's last write wins (6), scatter_add sums (1 + 5 + 6).
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {}, {3.5}).gather(-1, make(d, DType::i64, {2}, {0, 0}));
      },
      DType::f64, {2}, {3.5, 3.5});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {}, {1})
            .scatter(0, make(d, DType::i64, {2}, {0, 0}), make(d, DType::f64, {2}, {5, 6}));
      },
      DType::f64, {}, {6});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {}, {1})
            .scatter_add(0, make(d, DType::i64, {2}, {0, 0}), make(d, DType::f64, {2}, {5, 6}));
      },
      DType::f64, {}, {12});
  // PyTorch: "index 1 is out of bounds for dimension 0 with size 1"; a 2-D index is refused.
  expect_error([](const Device& d) { return make(d, DType::f64, {}, {3.5}).gather(0, make(d, DType::i64, {1}, {1})); },
               sy::Errc::index_out_of_range);
  expect_error(
      [](const Device& d) {
        return make(d, DType::f64, {}, {3.5}).gather(0, make(d, DType::i64, {1, 1}, {0}));
      },
      sy::Errc::shape_mismatch);
}

TEST_CASE("fill values outside an integer dtype wrap like casts", "[ops][creation][int]") {
  expect_all([](const Device& d) { return make(d, DType::u8, {1}, {7}).pad({1}, {0}, -1); }, DType::u8, {2}, {255, 7});
  expect_all([](const Device& d) { return d.full({2}, 300, DType::u8); }, DType::u8, {2}, {44, 44});
  expect_all([](const Device& d) { return make(d, DType::u8, {2}, {1, 250}) + 300; }, DType::u8, {2}, {45, 38});
  expect_all([](const Device& d) { return make(d, DType::i32, {1}, {1}) + 3000000000LL; }, DType::i32, {1},
             {3000000001.0 - 4294967296.0});
}

TEST_CASE("an index out of range fails the op with index_out_of_range", "[ops][layout][index][errors]") {
  auto x = [](const Device& d) { return make(d, DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}); };
  expect_error(
      [&](const Device& d) {
        return x(d).gather(1, make(d, DType::i64, {2, 1}, {0, 3}));
      },
      sy::Errc::index_out_of_range);
  expect_error([&](const Device& d) { return x(d).index_select(0, make(d, DType::i64, {1}, {-3})); },
               sy::Errc::index_out_of_range);
  expect_error(
      [&](const Device& d) {
        return x(d).scatter_add(0, make(d, DType::i64, {1, 1}, {2}), x(d));
      },
      sy::Errc::index_out_of_range);
  CHECK_THROWS_AS(x(reference()).gather(1, make(reference(), DType::f32, {2, 1}, {0, 0})), sy::Error);
  CHECK_THROWS_AS(x(reference()).gather(1, make(reference(), DType::i64, {3, 1}, {0, 0, 0})), sy::Error);
}

TEST_CASE("creation ops: full, arange, eye", "[ops][creation]") {
  expect_all([](const Device& d) { return d.full({2, 2}, 3.5, DType::f64); }, DType::f64, {2, 2}, {3.5, 3.5, 3.5, 3.5});
  expect_all([](const Device& d) { return d.full({3}, 1, DType::boolean); }, DType::boolean, {3}, {1, 1, 1});
  expect_all([](const Device& d) { return d.arange(1, 2, 0.25, DType::f32); }, DType::f32, {4}, {1, 1.25, 1.5, 1.75});
  expect_all([](const Device& d) { return d.arange(5, 0, -2, DType::i32); }, DType::i32, {3}, {5, 3, 1});
  expect_all([](const Device& d) { return d.arange(0, 0); }, DType::i64, {0}, {});
  expect_all([](const Device& d) { return d.eye(2, 3, DType::u8); }, DType::u8, {2, 3}, {1, 0, 0, 0, 1, 0});
  CHECK_THROWS_AS(reference().arange(0, 1, 0), sy::Error);
}

TEST_CASE("random streams are identical on every host backend", "[ops][random]") {
  for (const auto& d : devices()) d.seed(1234);
  std::vector<sy::TensorData> u, n, b;
  for (const auto& d : devices()) {
    u.push_back(d.uniform({257}, -2, 3).read().get());
    n.push_back(d.normal({64}, 1, 0.5, DType::f64).read().get());
    b.push_back(d.bernoulli({100}, 0.3, DType::boolean).read().get());
  }
  for (size_t i = 1; i < u.size(); ++i) {
    INFO(devices()[i].name());
    CHECK(compare(u[i], u[0], {0, 0}) == "");
    CHECK(compare(n[i], n[0], {1e-15, 0}) == "");
    CHECK(compare(b[i], b[0], {0, 0}) == "");
  }
  auto v = u[0].to_vector<double>();
  CHECK(*std::min_element(v.begin(), v.end()) >= -2);
  CHECK(*std::max_element(v.begin(), v.end()) < 3);
  // Reseeding restarts the stream.
  auto r = reference();
  r.seed(1234);
  CHECK(compare(r.uniform({257}, -2, 3).read().get(), u[0], {0, 0}) == "");
}

TEST_CASE("every dtype bridges between devices and reads back unchanged", "[ops][bridge]") {
  const std::vector<double> v = {0, 1, 0, 1, 1, 0};
  for (auto t : sy::all_dtypes) {
    INFO(sy::name_of(t));
    auto want = data(t, {2, 3}, t == DType::boolean ? v : std::vector<double>{-1, 2, 0, 100, 7, 3});
    if (t == DType::u8) want = data(t, {2, 3}, {255, 2, 0, 100, 7, 3});
    for (const auto& from : devices())
      for (const auto& to : devices()) {
        INFO(from.name() << " -> " << to.name());
        if (!from.dtype_support(t).storage || !to.dtype_support(t).storage) continue;  // a device without the dtype
        auto x = from.from_data(want);
        auto y = x.to(to);
        CHECK(y.device() == to);
        CHECK(compare(y.read().get(), want, {0, 0}) == "");
        // An op on the target sees the bridged values.
        CHECK(compare(y.reshape({3, 2}).to(from).read().get(), sy::TensorData(sy::Shape{3, 2}, t, want.bytes),
                      {0, 0}) == "");
      }
  }
}

// --- composed layout and resampling ops (issue 18) ------------------------------

namespace {
// Message of the Error `f` throws at the call ("" if none).
template <class F>
std::string call_error(F&& f) {
  try {
    (void)f();
  } catch (const sy::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("tril and triu keep a triangle of the last two axes", "[ops][layout]") {
  auto m = [](const Device& d) { return d.arange(1, 13, 1, DType::f32).reshape({3, 4}); };
  expect_all([&](const Device& d) { return m(d).tril(); }, DType::f32, {3, 4}, {1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  expect_all([&](const Device& d) { return m(d).triu(1); }, DType::f32, {3, 4}, {0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  expect_all([&](const Device& d) { return m(d).tril(-1); }, DType::f32, {3, 4}, {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  // Batched, bool.
  expect_all(
      [](const Device& d) {
        return d.full({2, 2, 2}, 1, DType::boolean).triu();
      },
      DType::boolean, {2, 2, 2}, {1, 1, 0, 1, 1, 1, 0, 1});
  auto d = reference();
  CHECK_THAT(call_error([&] { return d.ones({4}).tril(); }),
             Catch::Matchers::Contains("tril: the input needs at least 2 axes, got shape [4]"));
}

TEST_CASE("repeat, tile and roll follow PyTorch", "[ops][layout]") {
  auto v = [](const Device& d) { return make(d, DType::i64, {2}, {1, 2}); };
  expect_all(
      [&](const Device& d) {
        return v(d).repeat({2, 3});
      },
      DType::i64, {2, 6}, {1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2});
  expect_all(
      [&](const Device& d) {
        return cube(d).slice(0, {0, 1}).repeat({1, 1, 2}).slice(1, {0, 1});
      },
      DType::i64, {1, 1, 8}, {0, 1, 2, 3, 0, 1, 2, 3});
  expect_all([&](const Device& d) { return v(d).repeat({0}); }, DType::i64, {0}, {});
  expect_all(
      [&](const Device& d) {
        return cube(d).tile({2}).slice(2, {0, 8}).slice(0, {0, 1}).slice(1, {0, 1});
      },
      DType::i64, {1, 1, 8}, {0, 1, 2, 3, 0, 1, 2, 3});
  expect_all([&](const Device& d) { return d.arange(0, 5).roll(2); }, DType::i64, {5}, {3, 4, 0, 1, 2});
  expect_all(
      [&](const Device& d) {
        return d.arange(0, 6).reshape({2, 3}).roll({1, -1}, {0, 1});
      },
      DType::i64, {2, 3}, {4, 5, 3, 1, 2, 0});
  expect_all(
      [&](const Device& d) {
        return d.arange(0, 6).reshape({2, 3}).roll(-7);
      },
      DType::i64, {2, 3}, {1, 2, 3, 4, 5, 0});
  auto d = reference();
  CHECK_THAT(call_error([&] {
               return cube(d).repeat({2, 2});
             }),
             Catch::Matchers::Contains("repeat: 2 repeats for shape [2, 3, 4]"));
  CHECK_THAT(call_error([&] { return v(d).repeat({-1}); }), Catch::Matchers::Contains("must not be negative"));
  CHECK_THAT(call_error([&] {
               return cube(d).roll({1, 2}, {0});
             }),
             Catch::Matchers::Contains("roll: 2 shifts for 1 dims"));
  CHECK_THAT(call_error([&] { return cube(d).roll(1, 3); }), Catch::Matchers::Contains("roll: axis 3"));
}

TEST_CASE("pad modes reflect, replicate and circular, negative widths crop", "[ops][layout]") {
  auto row = [](const Device& d) { return make(d, DType::f32, {1, 1, 3}, {1, 2, 3}); };
  expect_all(
      [&](const Device& d) {
        return sy::nn::pad(row(d), {2, 1}, "reflect");
      },
      DType::f32, {1, 1, 6}, {3, 2, 1, 2, 3, 2});
  expect_all(
      [&](const Device& d) {
        return sy::nn::pad(row(d), {2, 1}, "replicate");
      },
      DType::f32, {1, 1, 6}, {1, 1, 1, 2, 3, 3});
  expect_all(
      [&](const Device& d) {
        return sy::nn::pad(row(d), {2, 1}, "circular");
      },
      DType::f32, {1, 1, 6}, {2, 3, 1, 2, 3, 1});
  expect_all(
      [&](const Device& d) {
        return sy::nn::pad(row(d), {-1, 2}, "reflect");
      },
      DType::f32, {1, 1, 4}, {2, 3, 2, 1});
  expect_all(
      [&](const Device& d) {
        return sy::nn::pad(row(d), {1, 0, 1, 1}, "replicate");
      },
      DType::f32, {1, 3, 4}, {1, 1, 2, 3, 1, 1, 2, 3, 1, 1, 2, 3});
  expect_all(
      [&](const Device& d) {
        return sy::nn::pad(row(d), {1, 1}, "constant", 9);
      },
      DType::f32, {1, 1, 5}, {9, 1, 2, 3, 9});
  auto d = reference();
  CHECK_THAT(call_error([&] {
               return sy::nn::pad(row(d), {3, 0}, "reflect");
             }),
             Catch::Matchers::Contains("must be below the axis's extent"));
  CHECK_THAT(call_error([&] {
               return sy::nn::pad(row(d), {4, 0}, "circular");
             }),
             Catch::Matchers::Contains("at most the axis's extent"));
  CHECK_THAT(call_error([&] {
               return sy::nn::pad(row(d).cast(DType::i64), {1, 1}, "reflect");
             }),
             Catch::Matchers::Contains("pad: mode reflect needs a floating tensor, got i64"));
  CHECK_THAT(call_error([&] {
               return sy::nn::pad(row(d), {1, 1}, "wrap");
             }),
             Catch::Matchers::Contains("pad: unknown mode \"wrap\""));
  CHECK_THAT(call_error([&] { return sy::nn::pad(row(d), {1}, "constant"); }),
             Catch::Matchers::Contains("(before, after) pairs"));
}

TEST_CASE("interpolate: 1-D linear is bit for bit PyTorch's kernel", "[ops][layout]") {
  // PyTorch 1.13's outputs (little-endian f32 bits, from F.interpolate on
  // these inputs): the source position in double, the sum as its compiled
  // fma(x0, w0, x1 * w1). Summing two rounded products was an ulp off in
  // most outputs, here in the last of the first case.
  auto bits_of = [](const std::string& hex) {
    std::vector<uint32_t> v(hex.size() / 8);
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t le = 0;
      for (int b = 3; b >= 0; --b)
        le = (le << 8) | std::stoul(hex.substr(8 * i + 2 * static_cast<size_t>(b), 2), nullptr, 16);
      v[i] = le;
    }
    return v;
  };
  auto floats_of = [&](const std::string& hex) {
    std::vector<float> f;
    for (uint32_t b : bits_of(hex)) f.push_back(std::bit_cast<float>(b));
    return f;
  };
  struct Case {
    const char* x;
    int64_t size;
    const char* want;
  };
  for (const auto& d : devices()) {
    for (const Case& c :
         {Case{"0ad763bf8fc275bd", 3, "0ad763bf3333f3be8ec275bd"},
          Case{"780d873f2fcf7abf0000803e", 11,
               "780d873f780d873fbb642f3fb14d053ec47bd9be2ecf7abfc4f324bfb3309ebefb61d83c0000803e0000803e"}}) {
      INFO(label(d) << " " << c.x);
      const auto x = floats_of(c.x);
      auto y = sy::nn::interpolate(d.tensor(x, {1, 1, static_cast<int64_t>(x.size())}), {c.size}, {}, "linear");
      std::vector<uint32_t> got;
      for (float v : y.to_vector<float>()) got.push_back(std::bit_cast<uint32_t>(v));
      CHECK(got == bits_of(c.want));
    }
  }
}

TEST_CASE("interpolate: nearest and linear modes as PyTorch", "[ops][layout]") {
  auto img = [](const Device& d) { return make(d, DType::f32, {1, 1, 2, 2}, {1, 2, 3, 4}); };
  expect_all(
      [&](const Device& d) {
        return sy::nn::interpolate(img(d), {4, 4});
      },
      DType::f32, {1, 1, 4, 4}, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // align_corners: the corners stay, the middle is the average.
  expect_all(
      [&](const Device& d) {
        return sy::nn::interpolate(img(d), {3, 3}, {}, "bilinear", true);
      },
      DType::f32, {1, 1, 3, 3}, {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4});
  // Half-pixel centres: output 0 of 4 samples input -0.25, clamped to 0.
  expect_all(
      [&](const Device& d) {
        return sy::nn::interpolate(make(d, DType::f64, {1, 1, 2}, {0, 4}), {4}, {}, "linear");
      },
      DType::f64, {1, 1, 4}, {0, 1, 3, 4});
  expect_all([&](const Device& d) { return sy::nn::interpolate(img(d).cast(DType::u8), {}, {0.5}); }, DType::u8,
             {1, 1, 1, 1}, {1});
  auto d = reference();
  CHECK_THAT(call_error([&] {
               return sy::nn::interpolate(img(d), {4, 4}, {}, "bilinear_typo");
             }),
             Catch::Matchers::Contains("unknown mode"));
  CHECK_THAT(call_error([&] { return sy::nn::interpolate(img(d), {4}, {}, "linear"); }),
             Catch::Matchers::Contains("linear is for 3-D input"));
  CHECK_THAT(call_error([&] {
               return sy::nn::interpolate(img(d), {4, 4}, {}, "nearest", true);
             }),
             Catch::Matchers::Contains("align_corners is only for the linear modes"));
  CHECK_THAT(call_error([&] { return sy::nn::interpolate(img(d), {}, {}); }),
             Catch::Matchers::Contains("either size or scale_factor"));
  CHECK_THAT(call_error([&] {
               return sy::nn::interpolate(img(d).cast(DType::i32), {4, 4});
             }),
             Catch::Matchers::Contains("not defined for i32"));
  CHECK_THAT(call_error([&] {
               return sy::nn::interpolate(img(d), {4, 4, 4});
             }),
             Catch::Matchers::Contains("size has 3 values for 2 spatial axes"));
}

TEST_CASE("cat leaves out 1-D empty tensors of any dtype after promoting with them, as PyTorch", "[ops][layout]") {
  for (const auto& d : devices()) {
    INFO(label(d));
    auto empty = d.zeros({0}, DType::f64);
    auto x = d.ones({2, 3});
    auto y = sy::cat({empty, x, empty}, 1);
    CHECK(y.shape() == sy::Shape{2, 3});
    CHECK(y.dtype() == DType::f64);
    CHECK(y.to_vector<double>() == std::vector<double>(6, 1.0));
    CHECK(sy::cat({x, empty}, 0).shape() == sy::Shape{2, 3});
    CHECK(sy::cat({empty, empty}, 0).shape() == sy::Shape{0});
    CHECK(sy::cat({empty, d.ones({2})}, 0).to_vector<double>() == std::vector<double>{1, 1});
    // Only 1-D empties: a [0, 3] must match like any other operand.
    CHECK_THROWS_AS(sy::cat({d.zeros({0, 3}), d.ones({2})}, 0), sy::Error);
  }
}
