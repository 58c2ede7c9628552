// SPDX-License-Identifier: Apache-2.0
// The ONNX loader's own behaviour: load-time refusals that name the node,
// call-time input checks, dynamic axes, the per-signature plan cache,
// external data and concurrent runs. Models are built here with libonnx's
// protobuf types (the test, not the loader's API, knows them).

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <onnx/onnx-data_pb.h>
#include <onnx/onnx_pb.h>
#include <optional>
#include <random>
#include <sys/stat.h>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <variant>

#include <switchyard/onnx.hpp>
#include <switchyard/switchyard.hpp>

namespace sy = switchyard;
namespace pb = ::onnx;

namespace {

constexpr auto kWait = std::chrono::seconds(60);

void set_type(pb::ValueInfoProto* v, const std::string& name, int elem,
              std::vector<std::variant<int64_t, std::string>> dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (auto& d : dims) {
    auto* dim = shape->add_dim();
    if (std::holds_alternative<int64_t>(d))
      dim->set_dim_value(std::get<int64_t>(d));
    else
      dim->set_dim_param(std::get<std::string>(d));
  }
}

struct Builder {
  pb::ModelProto model;
  explicit Builder(int64_t opset = 13) {
    model.set_ir_version(8);
    auto* op = model.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
  }
  pb::GraphProto& g() { return *model.mutable_graph(); }
  pb::NodeProto& node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                      const std::string& name = "") {
    auto* n = g().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& i : in) n->add_input(i);
    for (auto& o : out) n->add_output(o);
    return *n;
  }
  void input(const std::string& name, int elem, std::vector<std::variant<int64_t, std::string>> dims) {
    set_type(g().add_input(), name, elem, std::move(dims));
  }
  void output(const std::string& name, int elem, std::vector<std::variant<int64_t, std::string>> dims) {
    set_type(g().add_output(), name, elem, std::move(dims));
  }
  pb::TensorProto& init(const std::string& name, std::vector<float> v, std::vector<int64_t> dims) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(pb::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (auto x : v) t->add_float_data(x);
    return *t;
  }
  void init_i64(const std::string& name, std::vector<int64_t> v, std::vector<int64_t> dims) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(pb::TensorProto::INT64);
    for (auto d : dims) t->add_dims(d);
    for (auto x : v) t->add_int64_data(x);
  }
  // INT8, UINT8 and INT32 initializers (ONNX keeps all three in int32_data).
  void init_int(const std::string& name, int elem, std::vector<int32_t> v, std::vector<int64_t> dims) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (auto d : dims) t->add_dims(d);
    for (auto x : v) t->add_int32_data(x);
  }
  std::string bytes() const { return model.SerializeAsString(); }
};

void attr_s(pb::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::STRING);
  a->set_s(v);
}
void attr_i(pb::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INT);
  a->set_i(v);
}

// y = relu(x @ W + b), x [N, 3] with a dynamic batch axis.
struct Mlp {
  std::vector<float> w = {0.5f, -1.0f, 0.25f, 2.0f, -0.5f, 1.5f};  // [3, 2]
  std::vector<float> b = {0.1f, -0.2f};
  std::string bytes() const {
    Builder m;
    m.input("x", pb::TensorProto::FLOAT, {std::string("N"), int64_t{3}});
    m.init("W", w, {3, 2});
    m.init("b", b, {2});
    m.node("MatMul", {"x", "W"}, {"xw"}, "fc");
    m.node("Add", {"xw", "b"}, {"z"}, "bias");
    m.node("Relu", {"z"}, {"y"}, "act");
    m.output("y", pb::TensorProto::FLOAT, {std::string("N"), int64_t{2}});
    return m.bytes();
  }
  std::vector<float> expect(const std::vector<float>& x) const {
    std::vector<float> y;
    for (size_t r = 0; r < x.size() / 3; ++r)
      for (int c = 0; c < 2; ++c) {
        float acc = b[c];
        for (int k = 0; k < 3; ++k) acc += x[r * 3 + k] * w[k * 2 + c];
        y.push_back(std::max(acc, 0.0f));
      }
    return y;
  }
};

std::vector<float> read_floats(const sy::Tensor& t) {
  auto f = t.read();
  REQUIRE(f.wait_for(kWait));
  return f.get().to_vector<float>();
}

std::string load_error(const std::string& bytes, const sy::Device& d, sy::Errc* code = nullptr) {
  try {
    (void)sy::onnx::Model::load_bytes(bytes, d);
  } catch (const sy::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("onnx: an op outside the op set fails at load naming the node and the op", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // StringNormalizer works on strings, which the op set leaves out.
  Builder m(15);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{4}});
  m.node("StringNormalizer", {"x"}, {"y"}, "norm1");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{4}});
  sy::Errc code{};
  std::string what = load_error(m.bytes(), rt.cpu(), &code);
  CHECK(code == sy::Errc::unsupported);
  CHECK_THAT(what, Catch::Contains("node 'norm1'") && Catch::Contains("StringNormalizer") &&
                       Catch::Contains("not in Switchyard's op set"));
}

TEST_CASE("onnx: Conv with SAME_UPPER padding and MaxPool run on the native ops", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{4}, int64_t{4}});
  m.init("w", std::vector<float>(4, 1.0f), {1, 1, 2, 2});
  auto* pad = m.node("Conv", {"x", "w"}, {"c"}, "conv1").add_attribute();
  pad->set_name("auto_pad");
  pad->set_type(pb::AttributeProto::STRING);
  pad->set_s("SAME_UPPER");
  auto& pool = m.node("MaxPool", {"c"}, {"y"}, "pool1");
  auto* kernel = pool.add_attribute();
  kernel->set_name("kernel_shape");
  kernel->set_type(pb::AttributeProto::INTS);
  kernel->add_ints(2);
  kernel->add_ints(2);
  auto* strides = pool.add_attribute();
  strides->set_name("strides");
  strides->set_type(pb::AttributeProto::INTS);
  strides->add_ints(2);
  strides->add_ints(2);
  m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{2}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  std::vector<float> x(16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  auto out = model.run({{"x", rt.cpu().tensor(x, {1, 1, 4, 4})}});
  // SAME_UPPER with a 2x2 kernel pads one row and column at the end: the
  // 2x2 sums of x, then the largest of each 2x2 block of those.
  std::vector<float> sums(16);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      float s = 0;
      for (int dr = 0; dr < 2; ++dr)
        for (int dc = 0; dc < 2; ++dc)
          if (r + dr < 4 && c + dc < 4) s += x[static_cast<size_t>((r + dr) * 4 + c + dc)];
      sums[static_cast<size_t>(r * 4 + c)] = s;
    }
  std::vector<float> want;
  for (int r = 0; r < 4; r += 2)
    for (int c = 0; c < 4; c += 2)
      want.push_back(
          std::max({sums[static_cast<size_t>(r * 4 + c)], sums[static_cast<size_t>(r * 4 + c + 1)],
                    sums[static_cast<size_t>((r + 1) * 4 + c)], sums[static_cast<size_t>((r + 1) * 4 + c + 1)]}));
  CHECK(read_floats(out.at("y")) == want);
}

TEST_CASE("onnx: an unsupported attribute or attribute value fails at load naming it", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{4}});
  m.init_i64("pads", {1, 1}, {2});
  attr_s(m.node("Pad", {"x", "pads"}, {"y"}, "pad0"), "mode", "wrap");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{6}});
  std::string what = load_error(m.bytes(), rt.cpu());
  CHECK_THAT(what, Catch::Contains("node 'pad0' (Pad)") && Catch::Contains("mode='wrap'"));

  Builder u;
  u.input("x", pb::TensorProto::FLOAT, {int64_t{4}});
  attr_i(u.node("Relu", {"x"}, {"y"}, "r"), "frobnicate", 1);
  u.output("y", pb::TensorProto::FLOAT, {int64_t{4}});
  CHECK_THAT(load_error(u.bytes(), rt.cpu()),
             Catch::Contains("node 'r' (Relu)") && Catch::Contains("attribute 'frobnicate'"));

  // Resize's modes are checked at load, not when a run first reaches the node.
  auto resize = [](int64_t opset, const std::string& attribute, const std::string& value) {
    Builder r(opset);
    r.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{2}});
    r.init("scales", {1, 1, 2, 2}, {4});
    r.init("roi", {}, {0});  // required before opset 13
    attr_s(r.node("Resize", {"x", opset < 13 ? "roi" : "", "scales"}, {"y"}, "rz"), attribute, value);
    r.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{4}, int64_t{4}});
    return r.bytes();
  };
  for (const auto& [opset, attribute, value] : std::vector<std::tuple<int64_t, std::string, std::string>>{
           {13, "coordinate_transformation_mode", "bogus"},
           {13, "coordinate_transformation_mode", "tf_half_pixel_for_nn"},
           {11, "coordinate_transformation_mode", "tf_half_pixel_for_nearest"},
           {13, "nearest_mode", "bogus"}}) {
    INFO(opset << " " << attribute << "=" << value);
    sy::Errc code{};
    CHECK_THAT(load_error(resize(opset, attribute, value), rt.cpu(), &code),
               Catch::Contains("node 'rz' (Resize)") && Catch::Contains(attribute + "='" + value + "'"));
    CHECK(code == sy::Errc::unsupported);
  }
  auto nn = sy::onnx::Model::load_bytes(resize(11, "coordinate_transformation_mode", "tf_half_pixel_for_nn"), rt.cpu());
  auto f = nn.infer({{"x", sy::TensorData::from(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2})}});
  REQUIRE(f.wait_for(kWait));
  // Source (o + 0.5) / 2, rounded half down and clamped: rows and columns 0, 1, 1, 1.
  CHECK(f.get().at("y").to_vector<float>() == std::vector<float>{1, 2, 2, 2, 3, 4, 4, 4, 3, 4, 4, 4, 3, 4, 4, 4});
}

TEST_CASE("onnx: BatchNormalization training_mode=1 normalises by the batch and moves the running statistics",
          "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  auto model_bytes = [](int outputs, int64_t opset) {
    Builder m(opset);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}, int64_t{3}});
    m.init("scale", {2.0f, 0.5f}, {2});
    m.init("bias", {1.0f, -1.0f}, {2});
    m.init("mean", {0.5f, -4.0f}, {2});
    m.init("var", {1.0f, 9.0f}, {2});
    std::vector<std::string> outs{"y", "running_mean", "running_var"};
    outs.resize(static_cast<size_t>(outputs));
    auto& n = m.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, outs, "bn");
    attr_i(n, "training_mode", 1);
    auto* momentum = n.add_attribute();
    momentum->set_name("momentum");
    momentum->set_type(pb::AttributeProto::FLOAT);
    momentum->set_f(0.75f);
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}, int64_t{3}});
    if (outputs > 1) m.output("running_mean", pb::TensorProto::FLOAT, {int64_t{2}});
    if (outputs > 2) m.output("running_var", pb::TensorProto::FLOAT, {int64_t{2}});
    return m.bytes();
  };
  const std::vector<float> x = {1, 2, 3, -1, 0, 7, 4, 5, 9, 2, 2, -3};  // [2, 2, 3]
  // Per channel: the mean and biased variance over the batch and the last axis.
  std::vector<double> mean(2, 0.0), var(2, 0.0);
  for (int c = 0; c < 2; ++c) {
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i) mean[c] += x[static_cast<size_t>(b * 6 + c * 3 + i)] / 6.0;
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i) {
        const double d = x[static_cast<size_t>(b * 6 + c * 3 + i)] - mean[c];
        var[c] += d * d / 6.0;
      }
  }
  const double scale[] = {2.0, 0.5}, bias[] = {1.0, -1.0}, run_mean[] = {0.5, -4.0}, run_var[] = {1.0, 9.0};
  for (const char* device : {"cpu:0", "reference:0"}) {
    INFO(device);
    auto dev = rt.device(device);
    auto model = sy::onnx::Model::load_bytes(model_bytes(3, 15), dev);
    auto out = model.run({{"x", dev.tensor(x, {2, 2, 3})}});
    auto y = read_floats(out.at("y"));
    REQUIRE(y.size() == 12);
    for (size_t k = 0; k < 12; ++k) {
      const size_t c = (k / 3) % 2;
      CHECK(y[k] == Approx((x[k] - mean[c]) / std::sqrt(var[c] + 1e-5) * scale[c] + bias[c]).epsilon(1e-5));
    }
    auto rm = read_floats(out.at("running_mean")), rv = read_floats(out.at("running_var"));
    for (size_t c = 0; c < 2; ++c) {
      CHECK(rm[c] == Approx(run_mean[c] * 0.75 + mean[c] * 0.25).epsilon(1e-5));
      CHECK(rv[c] == Approx(run_var[c] * 0.75 + var[c] * 0.25).epsilon(1e-5));
    }
    // Y alone in training mode: the same values.
    auto only_y = sy::onnx::Model::load_bytes(model_bytes(1, 15), dev).run({{"x", dev.tensor(x, {2, 2, 3})}});
    CHECK(read_floats(only_y.at("y")) == y);
  }
  // Opset 9's training form (is_test=0, five outputs) is not this: refused
  // at load, naming the node.
  Builder old(9);
  old.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}, int64_t{3}});
  for (const char* name : {"scale", "bias", "mean", "var"}) old.init(name, {1.0f, 1.0f}, {2});
  attr_i(old.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y", "m", "v", "sm", "sv"}, "bn9"),
         "is_test", 0);
  old.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}, int64_t{3}});
  sy::Errc code{};
  CHECK_THAT(load_error(old.bytes(), rt.cpu(), &code),
             Catch::Contains("node 'bn9' (BatchNormalization)") && Catch::Contains("is_test=0"));
  CHECK(code == sy::Errc::unsupported);
}

TEST_CASE("onnx: a dtype Switchyard lacks fails at load naming the value or node", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder in;
  in.input("x", pb::TensorProto::UINT16, {int64_t{4}});
  in.node("Relu", {"x"}, {"y"});
  in.output("y", pb::TensorProto::UINT16, {int64_t{4}});
  CHECK_THAT(load_error(in.bytes(), rt.cpu()), Catch::Contains("input 'x'") && Catch::Contains("UINT16"));

  // An intermediate value typed only by ONNX's shape inference.
  Builder mid;
  mid.input("x", pb::TensorProto::FLOAT, {int64_t{4}});
  attr_i(mid.node("Cast", {"x"}, {"h"}, "to_uint32"), "to", pb::TensorProto::UINT32);
  attr_i(mid.node("Cast", {"h"}, {"y"}, "back"), "to", pb::TensorProto::FLOAT);
  mid.output("y", pb::TensorProto::FLOAT, {int64_t{4}});
  CHECK_THAT(load_error(mid.bytes(), rt.cpu()),
             Catch::Contains("node 'to_uint32' (Cast)") && Catch::Contains("UINT32"));
}

TEST_CASE("onnx: FLOAT16, BFLOAT16, INT8 and INT16 values load and run", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT16, {int64_t{4}});
  m.node("Relu", {"x"}, {"r"});
  attr_i(m.node("Cast", {"r"}, {"b"}, "to_bf16"), "to", pb::TensorProto::BFLOAT16);
  attr_i(m.node("Cast", {"b"}, {"i"}, "to_int8"), "to", pb::TensorProto::INT8);
  attr_i(m.node("Cast", {"i"}, {"y"}, "to_int16"), "to", pb::TensorProto::INT16);
  m.output("y", pb::TensorProto::INT16, {int64_t{4}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto x = rt.cpu().tensor(std::vector<float>{-1.5f, 2.75f, 300.5f, 0.1f}, {4}).cast(sy::DType::f16);
  auto y = model.run({{"x", x}}).at("y");
  CHECK(y.dtype() == sy::DType::i16);
  // 300.5 is 300.5 in f16, 300 in bf16, 44 in i8 (wrapped).
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 44, 0});
}

TEST_CASE("onnx: an opset outside 7-17 fails at load", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m(18);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{4}});
  m.node("Relu", {"x"}, {"y"});
  m.output("y", pb::TensorProto::FLOAT, {int64_t{4}});
  sy::Errc code{};
  CHECK_THAT(load_error(m.bytes(), rt.cpu(), &code), Catch::Contains("opset 18"));
  CHECK(code == sy::Errc::unsupported);
  CHECK_THAT(load_error("not a model", rt.cpu()), Catch::Contains("not a valid ONNX model"));
  // Empty bytes parse as an empty message: refused as what they are.
  CHECK_THAT(load_error("", rt.cpu(), &code), Catch::Contains("not a valid ONNX model (0 bytes)"));
  CHECK(code == sy::Errc::invalid_argument);
  const auto dir = std::filesystem::temp_directory_path();
  try {
    (void)sy::onnx::Model::load(dir.string(), rt.cpu());
    FAIL("a directory loaded");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::invalid_argument);
    CHECK_THAT(std::string(e.what()), Catch::Contains("is a directory"));
  }
}

TEST_CASE("onnx: opsets 1-5 load per op only where the op is defined as in opset 6", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // Softsign has one definition from opset 1 on: an opset-1 model runs.
  Builder ok(1);
  ok.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
  ok.node("Softsign", {"x"}, {"y"}, "soft");
  ok.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
  auto model = sy::onnx::Model::load_bytes(ok.bytes(), rt.cpu());
  auto y = model.run({{"x", rt.cpu().tensor(std::vector<float>{1, -3}, {2})}}).at("y");
  CHECK(read_floats(y) == std::vector<float>{0.5f, -0.75f});
  // Relu was redefined in opset 6 (consumed_inputs dropped): refused, naming the node and why.
  Builder old(1);
  old.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
  old.node("Softsign", {"x"}, {"s"}, "soft");
  old.node("Relu", {"s"}, {"y"}, "act");
  old.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
  sy::Errc code{};
  CHECK_THAT(load_error(old.bytes(), rt.cpu(), &code), Catch::Contains("node 'act' (Relu)") &&
                                                           Catch::Contains("opset 1 of the default domain") &&
                                                           Catch::Contains("Relu changed in opset 6"));
  CHECK(code == sy::Errc::unsupported);
}

TEST_CASE("onnx: wrong inputs fail at the call naming the input", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto model = sy::onnx::Model::load_bytes(Mlp{}.bytes(), rt.cpu());
  auto x = [&](sy::Shape s, sy::DType t = sy::DType::f32) { return rt.cpu().zeros(std::move(s), t); };
  auto code_of = [&](const sy::onnx::TensorMap& in, std::string& what) {
    try {
      (void)model.run(in);
    } catch (const sy::Error& e) {
      what = e.what();
      return e.code();
    }
    return sy::Errc{};
  };
  std::string what;
  CHECK(code_of({{"x", x({2, 3}, sy::DType::f64)}}, what) == sy::Errc::dtype_mismatch);
  CHECK_THAT(what, Catch::Contains("input 'x'") && Catch::Contains("f32"));
  CHECK(code_of({{"x", x({2, 4})}}, what) == sy::Errc::shape_mismatch);
  CHECK_THAT(what, Catch::Contains("input 'x' axis 1 must be 3"));
  CHECK(code_of({{"x", x({6})}}, what) == sy::Errc::shape_mismatch);
  CHECK_THAT(what, Catch::Contains("input 'x' must have 2 axes"));
  CHECK(code_of({}, what) == sy::Errc::invalid_argument);
  CHECK_THAT(what, Catch::Contains("input 'x' is missing"));
  CHECK(code_of({{"x", x({1, 3})}, {"y", x({1})}}, what) == sy::Errc::invalid_argument);
  CHECK_THAT(what, Catch::Contains("no input 'y'"));
}

TEST_CASE("onnx: dynamic batch axis on cpu and reference, host data in and out", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Mlp mlp;
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(mlp.bytes(), rt.device(dev));
    REQUIRE(model.inputs().size() == 1);
    CHECK(model.inputs()[0].dims == std::vector<int64_t>{-1, 3});
    CHECK(model.inputs()[0].dim_names[0] == "N");
    for (int64_t n : {1, 4, 7}) {
      std::vector<float> x;
      for (int64_t i = 0; i < n * 3; ++i) x.push_back(static_cast<float>(i % 5) - 2.0f);
      auto out = model.infer({{"x", sy::TensorData::from(x, {n, 3})}});
      REQUIRE(out.wait_for(kWait));
      auto y = out.get().at("y");
      CHECK(y.shape == sy::Shape{n, 2});
      auto got = y.to_vector<float>();
      auto want = mlp.expect(x);
      for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
    }
  }
}

TEST_CASE("onnx: shape arithmetic is folded once per input shape and cached", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // y = reshape(x, [shape(x)[0], -1]) * 2: the target shape is computed by
  // Shape -> Gather -> Unsqueeze -> Concat, which a plan folds on the host.
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {std::string("B"), std::string("T"), int64_t{2}});
  m.init_i64("zero", {0}, {});
  m.init_i64("minus1", {-1}, {1});
  m.init("two", {2.0f}, {});
  m.node("Shape", {"x"}, {"s"});
  attr_i(m.node("Gather", {"s", "zero"}, {"b"}), "axis", 0);
  m.init_i64("axes0", {0}, {1});
  m.node("Unsqueeze", {"b", "axes0"}, {"b1"});
  attr_i(m.node("Concat", {"b1", "minus1"}, {"target"}), "axis", 0);
  m.node("Reshape", {"x", "target"}, {"r"});
  m.node("Mul", {"r", "two"}, {"y"});
  m.output("y", pb::TensorProto::FLOAT, {std::string("B"), std::string("F")});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto ops_now = [&] {
    auto f = rt.cpu().stats();
    REQUIRE(f.wait_for(kWait));
    return f.get().ops_executed;
  };
  auto run = [&](int64_t b, int64_t t) {
    auto x = rt.cpu().arange(0, static_cast<double>(b * t * 2), 1, sy::DType::f32).reshape({b, t, 2});
    REQUIRE(rt.cpu().sync().wait_for(kWait));
    const uint64_t before = ops_now();
    auto y = model.run({{"x", x}}).at("y");
    auto v = read_floats(y);
    CHECK(y.shape() == sy::Shape{b, t * 2});
    for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == 2.0f * static_cast<float>(i));
    return ops_now() - before;
  };
  run(2, 3);
  CHECK(model.cached_plans() == 1);
  // A cached run submits the reshape and the multiply (plus the upload of
  // the constant 2 if it was not kept), nothing for the shape arithmetic.
  const uint64_t cached_ops = run(2, 3);
  CHECK(cached_ops <= 2);
  CHECK(model.cached_plans() == 1);
  run(5, 1);
  CHECK(model.cached_plans() == 2);
}

TEST_CASE("onnx: past 256 signatures the oldest plans go, not all of them", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {std::string("n")});
  m.node("Relu", {"x"}, {"y"});
  m.output("y", pb::TensorProto::FLOAT, {std::string("n")});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  for (int64_t n = 1; n <= 300; ++n) {
    auto f = model.infer({{"x", sy::TensorData::from(std::vector<float>(static_cast<size_t>(n), -1.0f), {n})}});
    REQUIRE(f.wait_for(kWait));
    REQUIRE(f.get().at("y").shape == sy::Shape{n});
  }
  CHECK(model.cached_plans() == 256);
}

TEST_CASE("onnx: an input read as a shape keys the plan by its contents", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  m.input("shape", pb::TensorProto::INT64, {int64_t{2}});
  m.node("Reshape", {"x", "shape"}, {"y"});
  m.output("y", pb::TensorProto::FLOAT, {std::string("a"), std::string("b")});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto x = sy::TensorData::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  for (auto target : {std::vector<int64_t>{3, 2}, std::vector<int64_t>{6, 1}, std::vector<int64_t>{3, 2}}) {
    auto out = model.infer({{"x", x}, {"shape", sy::TensorData::from(target, {2})}});
    REQUIRE(out.wait_for(kWait));
    CHECK(out.get().at("y").shape == sy::Shape(target));
  }
  CHECK(model.cached_plans() == 2);
}

TEST_CASE("onnx: a constant reshaped by an input (through Identity) follows the input's contents", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // Reshape of an initializer is folded on the host; its target comes from
  // a graph input via Identity, so the plan must be keyed by that content.
  Builder m;
  m.input("shape", pb::TensorProto::INT64, {int64_t{2}});
  m.init("X", {1, 2, 3, 4, 5, 6}, {2, 3});
  m.node("Identity", {"shape"}, {"s2"});
  m.node("Reshape", {"X", "s2"}, {"y"});
  m.output("y", pb::TensorProto::FLOAT, {std::string("a"), std::string("b")});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  for (auto target : {std::vector<int64_t>{3, 2}, std::vector<int64_t>{6, 1}, std::vector<int64_t>{1, 6}}) {
    auto out = model.infer({{"shape", sy::TensorData::from(target, {2})}});
    REQUIRE(out.wait_for(kWait));
    auto y = out.get().at("y");
    CHECK(y.shape == sy::Shape(target));
    CHECK(y.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  }
}

TEST_CASE("onnx: initializers in an external data file", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto dir = std::filesystem::temp_directory_path() / ("sy_onnx_ext_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  {
    std::ofstream f(dir / "weights.bin", std::ios::binary);
    f.write("PADDING!", 8);  // the tensor starts at offset 8
    f.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(float)));
  }
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{2}});
  auto* t = m.g().add_initializer();
  t->set_name("W");
  t->set_data_type(pb::TensorProto::FLOAT);
  t->add_dims(2);
  t->add_dims(3);
  t->set_data_location(pb::TensorProto::EXTERNAL);
  for (auto [k, v] :
       {std::pair<const char*, std::string>{"location", "weights.bin"}, {"offset", "8"}, {"length", "24"}}) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
  m.node("MatMul", {"x", "W"}, {"y"});
  m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{3}});
  {
    std::ofstream f(dir / "model.onnx", std::ios::binary);
    f << m.bytes();
  }
  auto model = sy::onnx::Model::load((dir / "model.onnx").string(), rt.cpu());
  auto y = model.run({{"x", rt.cpu().tensor<float>({1, 10}, {1, 2})}}).at("y");
  CHECK(read_floats(y) == std::vector<float>{41, 52, 63});
  std::filesystem::remove_all(dir);
}

TEST_CASE("onnx: one loaded model runs from many threads at once", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Mlp mlp;
  auto model = sy::onnx::Model::load_bytes(mlp.bytes(), rt.cpu());
  std::atomic<int> wrong{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::uniform_real_distribution<float> u(-2, 2);
      for (int i = 0; i < 25; ++i) {
        const int64_t n = 1 + (t + i) % 5;  // several signatures, built concurrently
        std::vector<float> x(static_cast<size_t>(n * 3));
        for (auto& v : x) v = u(rng);
        auto out = model.infer({{"x", sy::TensorData::from(x, {n, 3})}});
        if (!out.wait_for(kWait)) {
          ++wrong;
          continue;
        }
        auto got = out.get().at("y").to_vector<float>();
        auto want = mlp.expect(x);
        for (size_t k = 0; k < want.size(); ++k)
          if (std::abs(got[k] - want[k]) > 1e-5f) ++wrong;
        ++done;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(done == 8 * 25);
  CHECK(model.cached_plans() == 5);
}

TEST_CASE("onnx: a pipeline split by node range runs across devices", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "cpu:1", "reference:0"}});
  Mlp mlp;
  // MatMul on cpu:0, the bias add on cpu:1, the ReLU on reference:0.
  auto model = sy::onnx::Model::load_bytes(
      mlp.bytes(), {{rt.device("cpu:0"), 0}, {rt.device("cpu:1"), 1}, {rt.device("reference:0"), 2}});
  CHECK(model.num_nodes() == 3);
  std::vector<float> x = {1, -2, 3, 0.5f, 0.25f, -1};
  auto y = model.run({{"x", rt.device("cpu:1").tensor(x, {2, 3})}}).at("y");
  CHECK(y.device().name() == "reference:0");
  auto got = read_floats(y);
  auto want = mlp.expect(x);
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
  std::string what;
  try {
    (void)sy::onnx::Model::load_bytes(mlp.bytes(), {{rt.device("cpu:0"), 0}, {rt.device("cpu:1"), 7}});
  } catch (const sy::Error& e) {
    what = e.what();
  }
  CHECK_THAT(what, Catch::Contains("stage starts at node 7"));
}

TEST_CASE("onnx: a failure while running names the node", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{3}});
  m.init_i64("idx", {7}, {1});
  m.node("Gather", {"x", "idx"}, {"y"}, "pick");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{1}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  try {
    (void)model.run({{"x", rt.cpu().zeros({3})}});
    FAIL("expected an error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::index_out_of_range);
    CHECK_THAT(std::string(e.what()), Catch::Contains("node 'pick' (Gather)") && Catch::Contains("index 7"));
  }
}

TEST_CASE("onnx: an index input out of a weight's range fails at the call naming the input and the node", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // ids index the rows of a [4, 2] table and the columns of a [2, 3] one:
  // the narrower bounds them.
  Builder m;
  m.input("ids", pb::TensorProto::INT64, {std::string("n")});
  m.input("x", pb::TensorProto::FLOAT, {int64_t{3}});
  m.init("rows_table", {0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  m.init("cols_table", {0, 1, 2, 100, 101, 102}, {2, 3});
  m.node("Gather", {"rows_table", "ids"}, {"r"}, "rows");
  attr_i(m.node("Gather", {"cols_table", "ids"}, {"c"}, "cols"), "axis", 1);
  m.node("Gather", {"x", "ids"}, {"xs"}, "from_input");  // data not a weight: no bound from it
  m.output("r", pb::TensorProto::FLOAT, {std::string("n"), int64_t{2}});
  m.output("c", pb::TensorProto::FLOAT, {int64_t{2}, std::string("n")});
  m.output("xs", pb::TensorProto::FLOAT, {std::string("n")});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  REQUIRE(model.inputs().size() == 2);
  CHECK(model.inputs()[0].index_extent == 3);
  CHECK(model.inputs()[1].index_extent == -1);

  auto x = sy::TensorData::from(std::vector<float>{5, 6, 7}, {3});
  // A negative index counts from the end of the axis each Gather reads.
  auto f = model.infer({{"ids", sy::TensorData::from(std::vector<int64_t>{0, 2, -1}, {3})}, {"x", x}});
  REQUIRE(f.wait_for(kWait));
  const auto got = f.get();
  CHECK(got.at("r").to_vector<float>() == std::vector<float>{0, 1, 20, 21, 30, 31});
  CHECK(got.at("c").to_vector<float>() == std::vector<float>{0, 2, 2, 100, 102, 102});
  CHECK(got.at("xs").to_vector<float>() == std::vector<float>{5, 7, 7});

  auto refused = [&](std::vector<int64_t> ids, sy::Shape shape) -> std::string {
    try {
      (void)model.infer({{"ids", sy::TensorData::from(ids, shape)}, {"x", x}});
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::index_out_of_range);
      return e.what();
    }
    return "accepted";
  };
  CHECK_THAT(refused({0, 1, 3}, {3}), Catch::Contains("input 'ids' holds 3 at [2]") &&
                                          Catch::Contains("node 'cols' (Gather)") && Catch::Contains("[-3, 3)"));
  CHECK_THAT(refused({-4}, {1}), Catch::Contains("holds -4 at [0]"));
  // infer_values checks the same.
  try {
    (void)model.infer_values({{"ids", sy::TensorData::from(std::vector<int64_t>{7}, {1})}, {"x", x}});
    FAIL("expected an error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::index_out_of_range);
    CHECK_THAT(std::string(e.what()), Catch::Contains("input 'ids' holds 7"));
  }
  // Device tensors are not read back to check: the Gather fails on the device.
  auto outs = model.run(sy::onnx::TensorMap{
      {"ids", rt.cpu().from_data(sy::TensorData::from(std::vector<int64_t>{9}, {1}))}, {"x", rt.cpu().from_data(x)}});
  auto r = outs.at("r").read();
  REQUIRE(r.wait_for(kWait));
  CHECK_THROWS_AS(r.get(), sy::Error);
}

TEST_CASE("onnx: a device op's failure names the node in infer and infer_values", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  // The indices are computed on the device, so no check at the call can
  // see them: ids + 10 is out of range for x's 3 entries.
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{3}});
  m.input("ids", pb::TensorProto::INT64, {int64_t{2}});
  m.init_i64("ten", {10}, {});
  m.node("Add", {"ids", "ten"}, {"shifted"}, "shift");
  m.node("Gather", {"x", "shifted"}, {"picked"}, "lookup");
  m.node("Relu", {"picked"}, {"y"}, "after");
  m.node("Neg", {"x"}, {"z"}, "independent");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
  m.output("z", pb::TensorProto::FLOAT, {int64_t{3}});
  for (const char* name : {"cpu:0", "reference:0"}) {
    INFO(name);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(name));
    auto x = sy::TensorData::from(std::vector<float>{1, 2, 3}, {3});
    auto ids = sy::TensorData::from(std::vector<int64_t>{0, 1}, {2});
    // The error a future fails with (none: it succeeded).
    auto failure_of = [](const auto& f) -> std::optional<sy::Error> {
      REQUIRE(f.wait_for(kWait));
      try {
        (void)f.get();
      } catch (const sy::Error& e) {
        return e;
      }
      return std::nullopt;
    };
    auto inferred = failure_of(model.infer({{"x", x}, {"ids", ids}}));
    REQUIRE(inferred);
    CHECK(inferred->code() == sy::Errc::index_out_of_range);
    CHECK_THAT(std::string(inferred->what()),
               Catch::StartsWith("onnx: node 'lookup' (Gather): " + std::string(name) + ": ") &&
                   Catch::Contains("index 10 is out of range for extent 3"));
    CHECK(inferred->tensor());
    auto valued = failure_of(model.infer_values({{"x", x}, {"ids", ids}}));
    REQUIRE(valued);
    CHECK_THAT(std::string(valued->what()), Catch::StartsWith("onnx: node 'lookup' (Gather): "));
    // run() hands out the tensors themselves: the failure names the device
    // and op, and which tensor; the independent output is fine.
    auto outs = model.run(sy::onnx::DataMap{{"x", x}, {"ids", ids}});
    auto read = failure_of(outs.at("y").read());
    REQUIRE(read);
    CHECK_THAT(std::string(read->what()), Catch::StartsWith(std::string(name) + ": "));
    CHECK(read->tensor());
    CHECK(outs.at("z").to_vector<float>() == std::vector<float>{-1, -2, -3});
    // In range, the same model runs.
    auto ok = model.infer({{"x", x}, {"ids", sy::TensorData::from(std::vector<int64_t>{-10, -8}, {2})}});
    REQUIRE(ok.wait_for(kWait));
    CHECK(ok.get().at("y").to_vector<float>() == std::vector<float>{1, 3});
  }
}

// A signature's third and later runs replay the second's recorded ops
// (Recording): a failure there must name the same node, and good runs in
// between must not be disturbed by it.
TEST_CASE("onnx: a replayed run names the failing node as the first runs do", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{3}});
  m.input("ids", pb::TensorProto::INT64, {int64_t{2}});
  m.init_i64("ten", {10}, {});
  m.node("Neg", {"x"}, {"nx"}, "first");
  m.node("Add", {"ids", "ten"}, {"shifted"}, "shift");
  m.node("Gather", {"nx", "shifted"}, {"picked"}, "lookup");
  m.node("Relu", {"picked"}, {"y"}, "after");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto x = sy::TensorData::from(std::vector<float>{-1, -2, 3}, {3});
  auto bad = sy::TensorData::from(std::vector<int64_t>{0, 1}, {2});
  auto good = sy::TensorData::from(std::vector<int64_t>{-10, -9}, {2});
  for (int run = 1; run <= 5; ++run) {
    INFO("run " << run);
    auto failed = model.infer({{"x", x}, {"ids", bad}});
    REQUIRE(failed.wait_for(kWait));
    try {
      (void)failed.get();
      FAIL("expected an error");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::index_out_of_range);
      CHECK_THAT(std::string(e.what()), Catch::StartsWith("onnx: node 'lookup' (Gather): cpu:0: "));
    }
    auto ok = model.infer({{"x", x}, {"ids", good}});
    REQUIRE(ok.wait_for(kWait));
    CHECK(ok.get().at("y").to_vector<float>() == std::vector<float>{1, 2});
  }
  CHECK(model.cached_plans() == 1);
}

// --- quantization: edge cases ONNX's backend tests leave out ---

namespace {

// The output `name` of a run on host data, as integers (exact).
std::vector<int64_t> run_ints(const sy::onnx::Model& model, const sy::onnx::DataMap& in, const std::string& name) {
  auto f = model.infer(in);
  REQUIRE(f.wait_for(kWait));
  return f.get().at(name).to_vector<int64_t>();
}

std::vector<double> run_doubles(const sy::onnx::Model& model, const sy::onnx::DataMap& in, const std::string& name) {
  auto f = model.infer(in);
  REQUIRE(f.wait_for(kWait));
  return f.get().at(name).to_vector<double>();
}

}  // namespace

TEST_CASE("onnx: QuantizeLinear rounds ties to even and saturates at both ends of i8", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{9}});
  m.init("s", {2.0f}, {});
  m.init_int("zp", pb::TensorProto::INT8, {-1}, {});
  m.node("QuantizeLinear", {"x", "s", "zp"}, {"y"}, "q");
  m.output("y", pb::TensorProto::INT8, {int64_t{9}});
  // x / 2: 0.5, 1.5, 2.5, -0.5, -1.5, -2.5 round to 0, 2, 2, -0, -2, -2;
  // 1000 and -1000 saturate; -256 / 2 - 1 = -129 saturates to -128.
  const std::vector<float> x = {1, 3, 5, -1, -3, -5, 1000, -1000, -256};
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    CHECK(model.run({{"x", sy::TensorData::from(x, {9})}}).at("y").dtype() == sy::DType::i8);
    CHECK(run_ints(model, {{"x", sy::TensorData::from(x, {9})}}, "y") ==
          std::vector<int64_t>{-1, 1, 1, -1, -3, -3, 127, -128, -128});
  }
}

TEST_CASE("onnx: QuantizeLinear and DequantizeLinear per axis on a non-default axis", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  m.init("s", {1.0f, 0.5f, 4.0f}, {3});
  m.init_int("zp", pb::TensorProto::UINT8, {0, 10, 250}, {3});
  attr_i(m.node("QuantizeLinear", {"x", "s", "zp"}, {"q"}, "q"), "axis", -1);
  attr_i(m.node("DequantizeLinear", {"q", "s", "zp"}, {"y"}, "dq"), "axis", -1);
  m.output("q", pb::TensorProto::UINT8, {int64_t{2}, int64_t{3}});
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  const std::vector<float> x = {-2, 3.25f, 30, 300, -10, -1000};
  // Column scales 1, 0.5, 4 and zero points 0, 10, 250: -2 -> 0 (saturated),
  // 3.25 / 0.5 = 6.5 -> 6 + 10, 30 / 4 = 7.5 -> 8 + 250 -> 255 (saturated);
  // 300 -> 255, -10 / 0.5 + 10 = -10 -> 0, -1000 / 4 + 250 = 0.
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    sy::onnx::DataMap in{{"x", sy::TensorData::from(x, {2, 3})}};
    CHECK(run_ints(model, in, "q") == std::vector<int64_t>{0, 16, 255, 255, 0, 0});
    CHECK(run_doubles(model, in, "y") == std::vector<double>{0, 3, 20, 255, -5, -1000});
  }
}

TEST_CASE("onnx: a quantization zero point of the wrong dtype or extent fails naming it", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // ONNX's type constraints hold at load: QuantizeLinear's zero point is u8 or i8.
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{4}});
  m.init("s", {1.0f}, {});
  m.init_int("zp", pb::TensorProto::INT32, {0}, {});
  m.node("QuantizeLinear", {"x", "s", "zp"}, {"y"}, "quant");
  m.output("y", pb::TensorProto::INT32, {int64_t{4}});
  sy::Errc code{};
  CHECK_THAT(load_error(m.bytes(), rt.cpu(), &code), Catch::Contains("node 'quant' (QuantizeLinear)") &&
                                                         Catch::Contains("input 'zp' is INT32") &&
                                                         Catch::Contains("it takes int8, uint8"));
  CHECK(code == sy::Errc::dtype_mismatch);

  // DequantizeLinear's zero point must have x's dtype (both are its type T).
  Builder d;
  d.input("x", pb::TensorProto::UINT8, {int64_t{4}});
  d.init("s", {1.0f}, {});
  d.init_int("zp", pb::TensorProto::INT8, {0}, {});
  d.node("DequantizeLinear", {"x", "s", "zp"}, {"y"}, "dequant");
  d.output("y", pb::TensorProto::FLOAT, {int64_t{4}});
  CHECK_THAT(load_error(d.bytes(), rt.cpu(), &code), Catch::Contains("node 'dequant' (DequantizeLinear)") &&
                                                         Catch::Contains("input 'zp' is INT8") &&
                                                         Catch::Contains("'x' made type T UINT8"));
  CHECK(code == sy::Errc::dtype_mismatch);

  // A per-axis scale must have the axis's extent.
  Builder a;
  a.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  a.init("s", {1.0f, 2.0f}, {2});
  a.node("QuantizeLinear", {"x", "s"}, {"y"}, "q1");
  a.output("y", pb::TensorProto::UINT8, {int64_t{2}, int64_t{3}});
  auto qa = sy::onnx::Model::load_bytes(a.bytes(), rt.cpu());
  try {
    (void)qa.run({{"x", rt.cpu().zeros({2, 3})}});
    FAIL("expected an error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::shape_mismatch);
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("node 'q1' (QuantizeLinear)") && Catch::Contains("y_scale has shape [2]"));
  }
}

TEST_CASE("onnx: MatMulInteger with per-row and per-column zero points is exact", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m;
  m.input("A", pb::TensorProto::UINT8, {int64_t{2}, int64_t{3}});
  m.input("B", pb::TensorProto::INT8, {int64_t{3}, int64_t{2}});
  m.init_int("azp", pb::TensorProto::UINT8, {255, 1}, {2});
  m.init_int("bzp", pb::TensorProto::INT8, {-128, 127}, {2});
  m.node("MatMulInteger", {"A", "B", "azp", "bzp"}, {"Y"}, "mmi");
  m.output("Y", pb::TensorProto::INT32, {int64_t{2}, int64_t{2}});
  const std::vector<uint8_t> a = {0, 255, 7, 200, 1, 0};
  const std::vector<int8_t> b = {-128, 127, 127, -128, 0, 5};
  // (A - azp per row) @ (B - bzp per column), in integers.
  std::vector<int64_t> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      int64_t acc = 0;
      for (int k = 0; k < 3; ++k)
        acc += (int64_t{a[i * 3 + k]} - (i == 0 ? 255 : 1)) * (int64_t{b[k * 2 + j]} - (j == 0 ? -128 : 127));
      want.push_back(acc);
    }
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    sy::onnx::DataMap in{{"A", sy::TensorData::from(a, {2, 3})}, {"B", sy::TensorData::from(b, {3, 2})}};
    CHECK(model.run(in).at("Y").dtype() == sy::DType::i32);
    CHECK(run_ints(model, in, "Y") == want);
  }
}

TEST_CASE("onnx: QLinearConv with per-channel weights and an i8 output saturates", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m;
  m.input("x", pb::TensorProto::UINT8, {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{2}});
  m.init("xs", {0.5f}, {});
  m.init_int("xzp", pb::TensorProto::UINT8, {10}, {});
  m.init_int("w", pb::TensorProto::INT8, {1, 1, 1, 1, -1, 2, 3, -4}, {2, 1, 2, 2});
  m.init("ws", {1.0f, 0.25f}, {2});
  m.init_int("wzp", pb::TensorProto::INT8, {0, 0}, {2});
  m.init("ys", {1.0f}, {});
  m.init_int("yzp", pb::TensorProto::INT8, {0}, {});
  m.init_int("bias", pb::TensorProto::INT32, {1, -6}, {2});
  m.node("QLinearConv", {"x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "bias"}, {"y"}, "qconv");
  m.output("y", pb::TensorProto::INT8, {int64_t{1}, int64_t{2}, int64_t{1}, int64_t{1}});
  const std::vector<uint8_t> x = {255, 250, 11, 12};  // minus 10: 245, 240, 1, 2
  // Channel 0: (245 + 240 + 1 + 2 + 1) * 0.5 = 244.5 -> 127 (saturated).
  // Channel 1: (-245 + 480 + 3 - 8 - 6) * 0.5 * 0.25 = 28 exactly.
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    CHECK(run_ints(model, {{"x", sy::TensorData::from(x, {1, 1, 2, 2})}}, "y") == std::vector<int64_t>{127, 28});
  }
}

TEST_CASE("onnx: window functions honour output_datatype and refuse a dtype Switchyard lacks", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m(17);
  m.init_i64("n", {4}, {});
  attr_i(m.node("HannWindow", {"n"}, {"y"}, "hann"), "output_datatype", pb::TensorProto::DOUBLE);
  m.output("y", pb::TensorProto::DOUBLE, {int64_t{4}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto y = model.run(sy::onnx::TensorMap{}).at("y");
  CHECK(y.dtype() == sy::DType::f64);
  const auto v = y.to_vector<double>();  // periodic: 0.5 - 0.5 cos(2 pi n / 4)
  REQUIRE(v.size() == 4);
  CHECK(v[0] == 0);
  CHECK(v[1] == Approx(0.5).margin(1e-15));
  CHECK(v[2] == 1);
  CHECK(v[3] == Approx(0.5).margin(1e-15));

  Builder u(17);
  u.init_i64("n", {4}, {});
  attr_i(u.node("BlackmanWindow", {"n"}, {"y"}, "bw"), "output_datatype", pb::TensorProto::UINT16);
  u.output("y", pb::TensorProto::UINT16, {int64_t{4}});
  sy::Errc code{};
  CHECK_THAT(load_error(u.bytes(), rt.cpu(), &code),
             Catch::Contains("node 'bw' (BlackmanWindow)") && Catch::Contains("output_datatype UINT16"));
  CHECK(code == sy::Errc::unsupported);
}

namespace {

void attr_ints(pb::NodeProto& n, const std::string& name, std::vector<int64_t> v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INTS);
  for (auto x : v) a->add_ints(x);
}

}  // namespace

TEST_CASE("onnx: LpPool with p 1 and 2 and zero pads", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  auto model_for = [](int64_t p, std::vector<int64_t> pads, int64_t out_w) {
    Builder m(11);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{3}});
    auto& n = m.node("LpPool", {"x"}, {"y"}, "lp");
    attr_ints(n, "kernel_shape", {2, 2});
    attr_ints(n, "strides", {1, 1});
    attr_ints(n, "pads", std::move(pads));
    attr_i(n, "p", p);
    m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}, out_w});
    return m.bytes();
  };
  const std::vector<float> x = {1, -2, 3, 4, 5, -6};
  for (const char* dev : {"cpu:0", "reference:0"}) {
    sy::onnx::DataMap in{{"x", sy::TensorData::from(x, {1, 1, 2, 3})}};
    auto l1 = sy::onnx::Model::load_bytes(model_for(1, {0, 1, 0, 1}, 4), rt.device(dev));
    auto y1 = run_doubles(l1, in, "y");
    REQUIRE(y1.size() == 4);
    for (size_t i = 0; i < 4; ++i) CHECK(y1[i] == Approx(std::vector<double>{5, 12, 16, 9}[i]));
    auto l2 = sy::onnx::Model::load_bytes(model_for(2, {0, 0, 0, 0}, 2), rt.device(dev));
    auto y2 = run_doubles(l2, in, "y");
    REQUIRE(y2.size() == 2);
    CHECK(y2[0] == Approx(std::sqrt(46.0)));
    CHECK(y2[1] == Approx(std::sqrt(74.0)));
  }
}

TEST_CASE("onnx: LpNormalization along an axis and its refused p", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}});
  auto& n = m.node("LpNormalization", {"x"}, {"y"}, "norm");
  attr_i(n, "axis", 0);
  attr_i(n, "p", 1);
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}});
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    CHECK(run_doubles(model, {{"x", sy::TensorData::from(std::vector<float>{1, -3, 3, 1}, {2, 2})}}, "y") ==
          std::vector<double>{0.25, -0.75, 0.75, 0.25});
  }
  Builder u;
  u.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
  attr_i(u.node("LpNormalization", {"x"}, {"y"}, "l3"), "p", 3);
  u.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
  sy::Errc code{};
  CHECK_THAT(load_error(u.bytes(), rt.cpu(), &code),
             Catch::Contains("node 'l3' (LpNormalization)") && Catch::Contains("p=3 (1 and 2 only)"));
  CHECK(code == sy::Errc::unsupported);
}

TEST_CASE("onnx: opset 6 broadcast=1 lines B up from axis and later opsets refuse the attribute", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m(6);
  m.input("a", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}, int64_t{2}});
  m.init("b", {10, 20, 30}, {3});
  auto& n = m.node("Add", {"a", "b"}, {"y"}, "add");
  attr_i(n, "broadcast", 1);
  attr_i(n, "axis", 1);
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}, int64_t{2}});
  std::vector<float> a(12);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  std::vector<double> want;
  for (size_t i = 0; i < a.size(); ++i) want.push_back(a[i] + 10.0 * static_cast<double>((i / 2) % 3 + 1));
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    CHECK(run_doubles(model, {{"a", sy::TensorData::from(a, {2, 3, 2})}}, "y") == want);
  }

  Builder late(13);
  late.input("a", pb::TensorProto::FLOAT, {int64_t{2}});
  late.input("b", pb::TensorProto::FLOAT, {int64_t{2}});
  attr_i(late.node("Mul", {"a", "b"}, {"y"}, "mul"), "broadcast", 1);
  late.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
  sy::Errc code{};
  CHECK_THAT(load_error(late.bytes(), rt.cpu(), &code),
             Catch::Contains("node 'mul' (Mul)") && Catch::Contains("attribute 'broadcast' (opset 6 and earlier"));
  CHECK(code == sy::Errc::unsupported);
}

TEST_CASE("onnx: Det pivots past a zero and gives 0 for a singular matrix", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m(11);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}, int64_t{3}});
  m.node("Det", {"x"}, {"y"}, "det");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
  const std::vector<float> x = {0, 2, 1, 1, 1, 1, 2, 1, 3,   // det -3
                                1, 2, 3, 2, 4, 6, 1, 1, 1};  // rows 1 and 2 dependent: 0
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    auto y = run_doubles(model, {{"x", sy::TensorData::from(x, {2, 3, 3})}}, "y");
    REQUIRE(y.size() == 2);
    CHECK(y[0] == Approx(-3.0));
    CHECK(y[1] == Approx(0.0).margin(1e-6));
  }
}

// --- data-dependent shapes ---

TEST_CASE("onnx: NonZero and Compress of a computed value follow the data on every run", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // The condition is computed on the device (x > 0): each run reads it
  // back, so no plan is kept and a new x gives new shapes.
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{6}});
  m.init("zero", {0.0f}, {});
  m.node("Greater", {"x", "zero"}, {"positive"}, "gt");
  m.node("Compress", {"x", "positive"}, {"y"}, "keep");
  m.node("NonZero", {"positive"}, {"where"}, "nz");
  m.output("y", pb::TensorProto::FLOAT, {std::string("n")});
  m.output("where", pb::TensorProto::INT64, {int64_t{1}, std::string("n")});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto run = [&](std::vector<float> x) {
    auto out = model.run({{"x", rt.cpu().tensor(x, {6})}});
    std::vector<int64_t> where = out.at("where").to_vector<int64_t>();
    return std::pair{read_floats(out.at("y")), where};
  };
  auto [y1, w1] = run({1, -2, 3, -4, 5, -6});
  CHECK(y1 == std::vector<float>{1, 3, 5});
  CHECK(w1 == std::vector<int64_t>{0, 2, 4});
  auto [y2, w2] = run({-1, 2, -3, -4, -5, 6});
  CHECK(y2 == std::vector<float>{2, 6});
  CHECK(w2 == std::vector<int64_t>{1, 5});
  auto [y3, w3] = run({-1, -2, -3, -4, -5, -6});
  CHECK(y3.empty());
  CHECK(w3.empty());
  CHECK(model.cached_plans() == 0);
}

TEST_CASE("onnx: a data-dependent op fails at run time naming the node and the model runs on", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  m.input("cond", pb::TensorProto::BOOL, {std::string("c")});
  attr_i(m.node("Compress", {"x", "cond"}, {"y"}, "pick"), "axis", 1);
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, std::string("n")});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto x = sy::TensorData::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto cond = [](std::vector<bool> c) {
    const auto n = static_cast<int64_t>(c.size());
    return sy::TensorData::from(c, {n});
  };
  try {
    (void)model.infer({{"x", x}, {"cond", cond({true, false, true, true})}});
    FAIL("expected an error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::shape_mismatch);
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("node 'pick' (Compress)") && Catch::Contains("condition has 4 entries"));
  }
  // The condition may be shorter than the axis; an input read on the host
  // keys the plan by its contents.
  auto out = model.infer({{"x", x}, {"cond", cond({false, true})}});
  REQUIRE(out.wait_for(kWait));
  CHECK(out.get().at("y").to_vector<float>() == std::vector<float>{2, 5});
  auto again = model.infer({{"x", x}, {"cond", cond({true, false, true})}});
  REQUIRE(again.wait_for(kWait));
  CHECK(again.get().at("y").to_vector<float>() == std::vector<float>{1, 3, 4, 6});
  // Nothing selected: an empty axis.
  auto none = model.infer({{"x", x}, {"cond", cond({false, false, false})}});
  REQUIRE(none.wait_for(kWait));
  CHECK(none.get().at("y").shape == sy::Shape{2, 0});
}

TEST_CASE("onnx: Unique without sorting keeps first occurrences and NonMaxSuppression honours its limit", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{6}});
  attr_i(m.node("Unique", {"x"}, {"u", "first", "inverse", "counts"}, "uniq"), "sorted", 0);
  m.output("u", pb::TensorProto::FLOAT, {std::string("n")});
  m.output("first", pb::TensorProto::INT64, {std::string("n")});
  m.output("inverse", pb::TensorProto::INT64, {int64_t{6}});
  m.output("counts", pb::TensorProto::INT64, {std::string("n")});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto f = model.infer({{"x", sy::TensorData::from(std::vector<float>{3, 1, 3, 2, 1, 3}, {6})}});
  REQUIRE(f.wait_for(kWait));
  auto out = f.get();
  CHECK(out.at("u").to_vector<float>() == std::vector<float>{3, 1, 2});
  CHECK(out.at("first").to_vector<int64_t>() == std::vector<int64_t>{0, 1, 3});
  CHECK(out.at("inverse").to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 2, 1, 0});
  CHECK(out.at("counts").to_vector<int64_t>() == std::vector<int64_t>{3, 2, 1});

  // Three disjoint boxes, one class: the limit of 2 keeps the two best.
  Builder n;
  n.input("boxes", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{3}, int64_t{4}});
  n.input("scores", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{3}});
  n.init_i64("limit", {2}, {1});
  n.node("NonMaxSuppression", {"boxes", "scores", "limit"}, {"sel"}, "nms");
  n.output("sel", pb::TensorProto::INT64, {std::string("k"), int64_t{3}});
  auto nms = sy::onnx::Model::load_bytes(n.bytes(), rt.cpu());
  auto boxes = sy::TensorData::from(std::vector<float>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}, {1, 3, 4});
  auto scores = sy::TensorData::from(std::vector<float>{0.2f, 0.9f, 0.5f}, {1, 1, 3});
  CHECK(run_ints(nms, {{"boxes", boxes}, {"scores", scores}}, "sel") == std::vector<int64_t>{0, 0, 1, 0, 0, 2});
}

// --- GridSample and RoiAlign: the modes ONNX's backend tests leave out ---

TEST_CASE("onnx: GridSample bicubic with border padding and nearest with reflection", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto model_of = [](const std::string& mode, const std::string& padding) {
    Builder m(16);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{4}});
    m.input("grid", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{3}, int64_t{2}});
    auto& n = m.node("GridSample", {"x", "grid"}, {"y"}, "sample");
    attr_s(n, "mode", mode);
    attr_s(n, "padding_mode", padding);
    m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{3}});
    return m.bytes();
  };
  // Points at x = 1.25 and 1.5 (beyond the right edge) and -3 (far left).
  auto grid = sy::TensorData::from(std::vector<float>{1.25f, 0, 1.5f, 0, -3, 0}, {1, 1, 3, 2});
  // Border padding on a constant image: every bicubic tap reads 7 and the
  // weights sum to 1.
  auto bicubic = sy::onnx::Model::load_bytes(model_of("bicubic", "border"), rt.cpu());
  auto flat = sy::TensorData::from(std::vector<float>(4, 7.0f), {1, 1, 1, 4});
  for (double v : run_doubles(bicubic, {{"x", flat}, {"grid", grid}}, "y")) CHECK(v == Approx(7.0));
  // Reflection about the pixel borders (align_corners=0): x = 1.25 maps to
  // pixel 4.0, mirrored to 3; 1.5 to 4.5, mirrored to 2.5, rounded to even
  // 2; -3 to -4.5, mirrored to 3.5, clamped to 3.
  auto nearest = sy::onnx::Model::load_bytes(model_of("nearest", "reflection"), rt.cpu());
  auto ramp = sy::TensorData::from(std::vector<float>{10, 11, 12, 13}, {1, 1, 1, 4});
  CHECK(run_doubles(nearest, {{"x", ramp}, {"grid", grid}}, "y") == std::vector<double>{13, 12, 13});
  // A grid of the wrong shape fails at run time naming the node.
  try {
    auto bad = sy::TensorData::from(std::vector<float>(9, 0), {1, 1, 3, 3});
    Builder m(16);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{4}});
    m.input("grid", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{3}, int64_t{3}});
    m.node("GridSample", {"x", "grid"}, {"y"}, "sample");
    m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{3}});
    (void)sy::onnx::Model::load_bytes(m.bytes(), rt.cpu()).infer({{"x", ramp}, {"grid", bad}});
    FAIL("expected an error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::shape_mismatch);
    CHECK_THAT(std::string(e.what()), Catch::Contains("node 'sample' (GridSample)") && Catch::Contains("grid must be"));
  }
}

TEST_CASE("onnx: RoiAlign max takes the largest weighted tap and avg the mean of the samples", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto model_of = [](const std::string& mode) {
    Builder m(16);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{2}});
    m.init("rois", {0, 0, 1, 1}, {1, 4});
    m.init_i64("batch", {0}, {1});
    auto& n = m.node("RoiAlign", {"x", "rois", "batch"}, {"y"}, "roi");
    attr_s(n, "mode", mode);
    attr_i(n, "sampling_ratio", 2);
    m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{1}});
    return m.bytes();
  };
  // half_pixel: samples at (y, x) in {-0.25, 0.25}^2, -0.25 clamped to 0.
  // Their bilinear values are 1, 1.25, 1.5 and 1.75 (mean 1.375); the
  // largest single weighted tap is 1 (the sample at (0, 0) reading x[0][0]).
  auto x = sy::TensorData::from(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2});
  auto avg = sy::onnx::Model::load_bytes(model_of("avg"), rt.cpu());
  CHECK(run_doubles(avg, {{"x", x}}, "y") == std::vector<double>{1.375});
  auto max = sy::onnx::Model::load_bytes(model_of("max"), rt.cpu());
  CHECK(run_doubles(max, {{"x", x}}, "y") == std::vector<double>{1.0});
}

// --- control flow ---

namespace {

// A subgraph for an If branch or a Loop/Scan body.
struct Body {
  pb::GraphProto g;
  explicit Body(const std::string& name) { g.set_name(name); }
  pb::NodeProto& node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
    auto* n = g.add_node();
    n->set_op_type(op);
    for (auto& i : in) n->add_input(i);
    for (auto& o : out) n->add_output(o);
    return *n;
  }
  void input(const std::string& name, int elem, std::vector<std::variant<int64_t, std::string>> dims) {
    set_type(g.add_input(), name, elem, std::move(dims));
  }
  void output(const std::string& name, int elem, std::vector<std::variant<int64_t, std::string>> dims) {
    set_type(g.add_output(), name, elem, std::move(dims));
  }
};

void attr_g(pb::NodeProto& n, const std::string& name, const Body& b) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::GRAPH);
  *a->mutable_g() = b.g;
}

// y = If(c) then_b else_b, with a BOOL scalar c and x [2] as inputs: the
// branches read x from the outer graph.
std::string if_model(const Body& then_b, const Body& else_b) {
  Builder m;
  m.input("c", pb::TensorProto::BOOL, {});
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
  auto& n = m.node("If", {"c"}, {"y"}, "choose");
  attr_g(n, "then_branch", then_b);
  attr_g(n, "else_branch", else_b);
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
  return m.bytes();
}

sy::TensorData flag(bool c) { return sy::TensorData::from(std::vector<bool>{c}, {}); }

}  // namespace

TEST_CASE("onnx: an If whose condition the device computes takes the branch the data asks for", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // y = sum(x) > 0 ? x * 2 : -x; both branches read the outer x.
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{3}});
  m.init("zero", {0.0f}, {});
  m.init("two", {2.0f}, {});
  attr_i(m.node("ReduceSum", {"x"}, {"s"}, "sum"), "keepdims", 0);
  m.node("Greater", {"s", "zero"}, {"positive"}, "gt");
  Body then_b("double_it"), else_b("negate_it");
  then_b.node("Mul", {"x", "two"}, {"t"});
  then_b.output("t", pb::TensorProto::FLOAT, {int64_t{3}});
  else_b.node("Neg", {"x"}, {"e"});
  else_b.output("e", pb::TensorProto::FLOAT, {int64_t{3}});
  auto& n = m.node("If", {"positive"}, {"y"}, "choose");
  attr_g(n, "then_branch", then_b);
  attr_g(n, "else_branch", else_b);
  m.output("y", pb::TensorProto::FLOAT, {int64_t{3}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto run = [&](std::vector<float> x) { return read_floats(model.run({{"x", rt.cpu().tensor(x, {3})}}).at("y")); };
  CHECK(run({1, 2, -1}) == std::vector<float>{2, 4, -2});
  CHECK(run({1, -5, 1}) == std::vector<float>{-1, 5, -1});
  CHECK(run({3, 0, 0}) == std::vector<float>{6, 0, 0});
  CHECK(model.cached_plans() == 0);  // the condition came from the device
}

TEST_CASE("onnx: an If on a graph input keys the plan by the condition", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Body then_b("relu"), else_b("ident");
  then_b.node("Relu", {"x"}, {"t"});
  then_b.output("t", pb::TensorProto::FLOAT, {int64_t{2}});
  else_b.node("Identity", {"x"}, {"e"});
  else_b.output("e", pb::TensorProto::FLOAT, {int64_t{2}});
  auto model = sy::onnx::Model::load_bytes(if_model(then_b, else_b), rt.cpu());
  auto x = sy::TensorData::from(std::vector<float>{-1, 2}, {2});
  for (bool c : {true, false, true}) {
    auto out = model.infer({{"c", flag(c)}, {"x", x}});
    REQUIRE(out.wait_for(kWait));
    CHECK(out.get().at("y").to_vector<float>() == (c ? std::vector<float>{0, 2} : std::vector<float>{-1, 2}));
  }
  CHECK(model.cached_plans() == 2);
}

TEST_CASE("onnx: a cached plan keeps what its runs read: host-folded outputs and a branch's outer weight", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // A run from a cached plan copies only the values its nodes read; an
  // output the host folded and the initializers a subgraph reads (unseen by
  // the graph's own nodes) must still be there on every cached run.
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {std::string("B"), int64_t{2}});
  m.input("c", pb::TensorProto::BOOL, {});
  m.init_i64("zero", {0}, {});
  m.init("w", {3.0f, -1.0f}, {2});
  m.init("bias", {10.0f, 20.0f}, {2});
  m.node("Shape", {"x"}, {"s"});
  attr_i(m.node("Gather", {"s", "zero"}, {"batch"}), "axis", 0);
  m.node("Mul", {"x", "w"}, {"xw"});
  Body then_b("add_bias"), else_b("pass");
  then_b.node("Add", {"xw", "bias"}, {"t"});
  then_b.output("t", pb::TensorProto::FLOAT, {std::string("B"), int64_t{2}});
  else_b.node("Identity", {"xw"}, {"e"});
  else_b.output("e", pb::TensorProto::FLOAT, {std::string("B"), int64_t{2}});
  auto& n = m.node("If", {"c"}, {"y"}, "choose");
  attr_g(n, "then_branch", then_b);
  attr_g(n, "else_branch", else_b);
  m.output("batch", pb::TensorProto::INT64, {});
  m.output("y", pb::TensorProto::FLOAT, {std::string("B"), int64_t{2}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    for (int64_t b : {1, 3}) {
      std::vector<float> x(static_cast<size_t>(b * 2));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
      auto out = model.infer({{"x", sy::TensorData::from(x, {b, 2})}, {"c", flag(true)}});
      REQUIRE(out.wait_for(kWait));
      auto got = out.get();
      CHECK(got.at("batch").to_vector<int64_t>() == std::vector<int64_t>{b});
      const auto y = got.at("y").to_vector<float>();
      REQUIRE(y.size() == x.size());
      for (size_t i = 0; i < y.size(); ++i)
        CHECK(y[i] == x[i] * (i % 2 == 0 ? 3.0f : -1.0f) + (i % 2 == 0 ? 10.0f : 20.0f));
    }
  }
  CHECK(model.cached_plans() == 2);

  // Without subgraphs the plan picks the slots: the folded output still.
  Builder flat;
  flat.input("x", pb::TensorProto::FLOAT, {std::string("B"), int64_t{2}});
  flat.init_i64("zero", {0}, {});
  flat.init("w", {3.0f, -1.0f}, {2});
  flat.node("Shape", {"x"}, {"s"});
  attr_i(flat.node("Gather", {"s", "zero"}, {"batch"}), "axis", 0);
  flat.node("Mul", {"x", "w"}, {"y"});
  flat.output("batch", pb::TensorProto::INT64, {});
  flat.output("y", pb::TensorProto::FLOAT, {std::string("B"), int64_t{2}});
  auto plain = sy::onnx::Model::load_bytes(flat.bytes(), rt.cpu());
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    auto out = plain.infer({{"x", sy::TensorData::from(std::vector<float>{1, 2, 3, 4}, {2, 2})}});
    REQUIRE(out.wait_for(kWait));
    auto got = out.get();
    CHECK(got.at("batch").to_vector<int64_t>() == std::vector<int64_t>{2});
    CHECK(got.at("y").to_vector<float>() == std::vector<float>{3, -2, 9, -4});
  }
  CHECK(plain.cached_plans() == 1);
}

TEST_CASE("onnx: a Loop carries a value and stacks a scan output reading an outer value", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // acc += x, M times; the scan output is acc after each step.
  Builder m;
  m.input("M", pb::TensorProto::INT64, {});
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
  m.init("acc0", {0, 0}, {2});
  Body body("accumulate");
  body.input("i", pb::TensorProto::INT64, {});
  body.input("cond_in", pb::TensorProto::BOOL, {});
  body.input("acc", pb::TensorProto::FLOAT, {int64_t{2}});
  // The body says stop, which a loop without a cond input ignores.
  body.node("Not", {"cond_in"}, {"cond_out"});
  body.node("Add", {"acc", "x"}, {"next"});
  body.node("Identity", {"next"}, {"seen"});
  body.output("cond_out", pb::TensorProto::BOOL, {});
  body.output("next", pb::TensorProto::FLOAT, {int64_t{2}});
  body.output("seen", pb::TensorProto::FLOAT, {int64_t{2}});
  attr_g(m.node("Loop", {"M", "", "acc0"}, {"sum", "steps"}, "repeat"), "body", body);
  m.output("sum", pb::TensorProto::FLOAT, {int64_t{2}});
  m.output("steps", pb::TensorProto::FLOAT, {std::string("M"), int64_t{2}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto f = model.infer({{"M", sy::TensorData::from(std::vector<int64_t>{3}, {})},
                        {"x", sy::TensorData::from(std::vector<float>{1, 10}, {2})}});
  REQUIRE(f.wait_for(kWait));
  auto out = f.get();
  CHECK(out.at("sum").to_vector<float>() == std::vector<float>{3, 30});
  CHECK(out.at("steps").shape == sy::Shape{3, 2});
  CHECK(out.at("steps").to_vector<float>() == std::vector<float>{1, 10, 2, 20, 3, 30});
  // No iteration: the carried value as given, and an empty scan output of
  // the body's declared element shape (ONNX Runtime's answer).
  auto none = model.infer({{"M", sy::TensorData::from(std::vector<int64_t>{0}, {})},
                           {"x", sy::TensorData::from(std::vector<float>{1, 10}, {2})}});
  REQUIRE(none.wait_for(kWait));
  auto empty = none.get();
  CHECK(empty.at("sum").to_vector<float>() == std::vector<float>{0, 0});
  CHECK(empty.at("steps").shape == sy::Shape{0, 2});
  CHECK(empty.at("steps").dtype == sy::DType::f32);
}

TEST_CASE("onnx: a branch with the wrong number of outputs fails naming the node and the other runs", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Body then_b("two_outputs"), else_b("one_output");
  then_b.node("Identity", {"x"}, {"t1"});
  then_b.node("Identity", {"x"}, {"t2"});
  then_b.output("t1", pb::TensorProto::FLOAT, {int64_t{2}});
  then_b.output("t2", pb::TensorProto::FLOAT, {int64_t{2}});
  else_b.node("Neg", {"x"}, {"e"});
  else_b.output("e", pb::TensorProto::FLOAT, {int64_t{2}});
  auto model = sy::onnx::Model::load_bytes(if_model(then_b, else_b), rt.cpu());
  auto x = sy::TensorData::from(std::vector<float>{-1, 2}, {2});
  try {
    (void)model.infer({{"c", flag(true)}, {"x", x}});
    FAIL("expected an error");
  } catch (const sy::Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("node 'choose' (If)") &&
                                          Catch::Contains("then_branch has 2 outputs, the node expects 1"));
  }
  auto out = model.infer({{"c", flag(false)}, {"x", x}});
  REQUIRE(out.wait_for(kWait));
  CHECK(out.get().at("y").to_vector<float>() == std::vector<float>{1, -2});

  // An op outside the op set inside a branch fails at load, naming it.
  Body coin("coin"), plain("plain");
  coin.node("StringNormalizer", {"x"}, {"t"}).set_name("flip");
  coin.output("t", pb::TensorProto::FLOAT, {int64_t{2}});
  plain.node("Identity", {"x"}, {"e"});
  plain.output("e", pb::TensorProto::FLOAT, {int64_t{2}});
  CHECK_THAT(load_error(if_model(coin, plain), rt.cpu()),
             Catch::Contains("node 'flip' (StringNormalizer)") && Catch::Contains("not in Switchyard's op set"));
}

// --- spectral ops and BitShift ---

TEST_CASE("onnx: DFT zero-pads to dft_length and keeps n / 2 + 1 bins one-sided", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m(17);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{3}, int64_t{1}});
  m.init_i64("n", {8}, {});
  auto& dft = m.node("DFT", {"x", "n"}, {"y"}, "dft");
  attr_i(dft, "onesided", 1);
  attr_i(dft, "axis", -2);  // counted with the complex axis: the signal axis, 1
  m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{5}, int64_t{2}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  // An impulse at 0 (padded to 8 points) has a flat spectrum: 1 + 0i.
  auto y = run_doubles(model, {{"x", sy::TensorData::from(std::vector<float>{1, 0, 0}, {1, 3, 1})}}, "y");
  REQUIRE(y.size() == 10);
  for (size_t k = 0; k < 5; ++k) {
    CHECK(y[2 * k] == Approx(1.0));
    CHECK(y[2 * k + 1] == Approx(0.0).margin(1e-6));
  }
}

TEST_CASE("onnx: BitShift on u8 wraps left shifts and refuses an unknown direction", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto model_of = [](const std::string& direction) {
    Builder m(11);
    m.input("x", pb::TensorProto::UINT8, {int64_t{4}});
    m.input("y", pb::TensorProto::UINT8, {int64_t{4}});
    attr_s(m.node("BitShift", {"x", "y"}, {"z"}, "shift"), "direction", direction);
    m.output("z", pb::TensorProto::UINT8, {int64_t{4}});
    return m.bytes();
  };
  auto x = sy::TensorData::from(std::vector<uint8_t>{0xF0, 1, 255, 3}, {4});
  auto y = sy::TensorData::from(std::vector<uint8_t>{2, 7, 8, 200}, {4});
  auto left = sy::onnx::Model::load_bytes(model_of("LEFT"), rt.cpu());
  CHECK(run_ints(left, {{"x", x}, {"y", y}}, "z") == std::vector<int64_t>{0xC0, 128, 0, 0});
  auto right = sy::onnx::Model::load_bytes(model_of("RIGHT"), rt.cpu());
  CHECK(run_ints(right, {{"x", x}, {"y", y}}, "z") == std::vector<int64_t>{0x3C, 0, 0, 0});
  CHECK_THAT(load_error(model_of("UP"), rt.cpu()),
             Catch::Contains("node 'shift' (BitShift)") && Catch::Contains("direction='UP'"));
}

TEST_CASE("onnx: int64 Div, Mod with fmod and Clip stay exact above 2^53", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  constexpr int64_t big = (int64_t{1} << 60) + 1;
  auto a = sy::TensorData::from(std::vector<int64_t>{big, -big, 7, -7, 7, -7, 0, big}, {8});
  auto b = sy::TensorData::from(std::vector<int64_t>{7, 7, 2, 2, -2, -2, 5, 1}, {8});
  Builder m(13);
  m.input("a", pb::TensorProto::INT64, {int64_t{8}});
  m.input("b", pb::TensorProto::INT64, {int64_t{8}});
  m.init_i64("lo", {-5}, {});
  m.init_i64("hi", {big + 1}, {});
  m.node("Div", {"a", "b"}, {"q"});
  attr_i(m.node("Mod", {"a", "b"}, {"r"}), "fmod", 1);
  m.node("Clip", {"a", "lo", "hi"}, {"c"});
  for (const char* o : {"q", "r", "c"}) m.output(o, pb::TensorProto::INT64, {int64_t{8}});
  // C's truncating division and fmod (the dividend's sign), as ONNX says.
  const std::vector<int64_t> q{164703072086692425, -164703072086692425, 3, -3, -3, 3, 0, big};
  const std::vector<int64_t> r{2, -2, 1, -1, 1, -1, 0, 0};
  const std::vector<int64_t> c{big, -5, 7, -5, 7, -5, 0, big};
  for (const char* name : {"cpu:0", "reference:0"}) {
    INFO(name);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(name));
    CHECK(run_ints(model, {{"a", a}, {"b", b}}, "q") == q);
    CHECK(run_ints(model, {{"a", a}, {"b", b}}, "r") == r);
    CHECK(run_ints(model, {{"a", a}, {"b", b}}, "c") == c);
  }
}

TEST_CASE("onnx: TopK before opset 10 takes k as an attribute", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto model_of = [](int64_t opset, bool with_k) {
    Builder m(opset);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{4}});
    auto& n = m.node("TopK", {"x"}, {"v", "i"}, "top");
    if (with_k) attr_i(n, "k", 2);
    m.output("v", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}});
    m.output("i", pb::TensorProto::INT64, {int64_t{2}, int64_t{2}});
    return m.bytes();
  };
  auto x = sy::TensorData::from(std::vector<float>{1, 4, 2, 3, 8, 5, 7, 6}, {2, 4});
  for (int64_t opset : {7, 9}) {
    auto model = sy::onnx::Model::load_bytes(model_of(opset, true), rt.cpu());
    CHECK(run_doubles(model, {{"x", x}}, "v") == std::vector<double>{4, 3, 8, 7});
    CHECK(run_ints(model, {{"x", x}}, "i") == std::vector<int64_t>{1, 3, 0, 2});
  }
  // From opset 10, K is an input: the attribute is refused, naming the node.
  CHECK_THAT(load_error(model_of(11, true), rt.cpu()),
             Catch::Contains("node 'top' (TopK)") && Catch::Contains("attribute 'k'"));
}

TEST_CASE("onnx: RoiAlign with an adaptive sampling grid matches the fixed grid of the same size", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // sampling_ratio 0 reads the rois on the host (the grid follows their
  // size); a 3 x 3 roi over 2 x 2 bins samples ceil(3 / 2) = 2 a side,
  // which sampling_ratio 2 computes on the device.
  auto model_of = [](const std::string& mode, int64_t ratio) {
    Builder m(16);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{1}, int64_t{4}, int64_t{4}});
    m.input("rois", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{4}});
    m.init_i64("batch", {1, 0}, {2});
    auto& n = m.node("RoiAlign", {"x", "rois", "batch"}, {"y"}, "roi");
    attr_s(n, "mode", mode);
    attr_i(n, "sampling_ratio", ratio);
    attr_i(n, "output_height", 2);
    attr_i(n, "output_width", 2);
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{1}, int64_t{2}, int64_t{2}});
    return m.bytes();
  };
  std::vector<float> xv(32);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 7) % 11) - 3.0f;
  const sy::onnx::DataMap in{{"x", sy::TensorData::from(xv, {2, 1, 4, 4})},
                             {"rois", sy::TensorData::from(std::vector<float>{0.5f, 0, 3.5f, 3, 1, 1, 4, 4}, {2, 4})}};
  for (const char* mode : {"avg", "max"}) {
    auto adaptive = sy::onnx::Model::load_bytes(model_of(mode, 0), rt.cpu());
    auto fixed = sy::onnx::Model::load_bytes(model_of(mode, 2), rt.cpu());
    auto a = run_doubles(adaptive, in, "y"), f = run_doubles(fixed, in, "y");
    REQUIRE(a.size() == f.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(f[i]).margin(1e-6));
  }
}

TEST_CASE("onnx: TfIdfVectorizer weighs counts in IDF and TFIDF modes and refuses string pools", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto ints = [](pb::NodeProto& n, const std::string& name, std::vector<int64_t> v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  };
  auto model_of = [&](const std::string& mode, bool strings) {
    Builder m(9);
    m.input("x", pb::TensorProto::INT64, {int64_t{4}});
    auto& n = m.node("TfIdfVectorizer", {"x"}, {"y"}, "tfidf");
    attr_s(n, "mode", mode);
    attr_i(n, "min_gram_length", 1);
    attr_i(n, "max_gram_length", 2);
    attr_i(n, "max_skip_count", 1);
    ints(n, "ngram_counts", {0, 2});
    ints(n, "ngram_indexes", {0, 1, 2});
    ints(n, "pool_int64s", {1, 3, 1, 2});  // unigrams 1 and 3, the bigram (1, 2)
    auto* w = n.add_attribute();
    w->set_name("weights");
    w->set_type(pb::AttributeProto::FLOATS);
    for (float v : {0.5f, 2.0f, 4.0f}) w->add_floats(v);
    if (strings) {
      auto* s = n.add_attribute();
      s->set_name("pool_strings");
      s->set_type(pb::AttributeProto::STRINGS);
      s->add_strings("a");
    }
    m.output("y", pb::TensorProto::FLOAT, {int64_t{3}});
    return m.bytes();
  };
  // In [1, 2, 1, 2]: 1 twice, 3 never, (1, 2) twice adjacent and never
  // two apart.
  const sy::onnx::DataMap in{{"x", sy::TensorData::from(std::vector<int64_t>{1, 2, 1, 2}, {4})}};
  auto run = [&](const std::string& mode) {
    return run_doubles(sy::onnx::Model::load_bytes(model_of(mode, false), rt.cpu()), in, "y");
  };
  CHECK(run("TF") == std::vector<double>{2, 0, 2});
  CHECK(run("IDF") == std::vector<double>{0.5, 0, 4});
  CHECK(run("TFIDF") == std::vector<double>{1, 0, 8});
  CHECK_THAT(load_error(model_of("TF", true), rt.cpu()),
             Catch::Contains("node 'tfidf' (TfIdfVectorizer)") && Catch::Contains("pool_strings"));
}

TEST_CASE("onnx: Pow by a constant 2 squares and keeps the broadcast shape", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  const double inf = std::numeric_limits<double>::infinity();
  auto model_for = [](float exponent, std::vector<int64_t> exponent_dims, std::vector<int64_t> out_dims) {
    Builder m;
    m.input("x", pb::TensorProto::FLOAT, {int64_t{5}});
    m.init("e", {exponent}, exponent_dims);
    m.node("Pow", {"x", "e"}, {"y"}, "square");
    std::vector<std::variant<int64_t, std::string>> dims(out_dims.begin(), out_dims.end());
    m.output("y", pb::TensorProto::FLOAT, dims);
    return m.bytes();
  };
  const std::vector<float> x = {-3.0f, 0.5f, std::numeric_limits<float>::quiet_NaN(),
                                -std::numeric_limits<float>::infinity(), 1e20f};
  sy::onnx::DataMap in{{"x", sy::TensorData::from(x, {5})}};
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    auto square = sy::onnx::Model::load_bytes(model_for(2.0f, {}, {5}), rt.device(dev));
    auto y = run_doubles(square, in, "y");
    REQUIRE(y.size() == 5);
    CHECK(y[0] == 9.0);
    CHECK(y[1] == 0.25);
    CHECK(std::isnan(y[2]));
    CHECK(y[3] == inf);
    CHECK(y[4] == inf);  // overflows f32, as pow does
    // A [1, 1] exponent broadcasts x to [1, 5].
    auto wide = sy::onnx::Model::load_bytes(model_for(2.0f, {1, 1}, {1, 5}), rt.device(dev));
    auto f = wide.infer(in);
    REQUIRE(f.wait_for(kWait));
    CHECK(f.get().at("y").shape == sy::Shape{1, 5});
    // Any other exponent is pow's.
    auto cube = sy::onnx::Model::load_bytes(model_for(3.0f, {}, {5}), rt.device(dev));
    auto c = run_doubles(cube, in, "y");
    REQUIRE(c.size() == 5);
    CHECK(c[0] == -27.0);
    CHECK(c[3] == -inf);
  }
}

// --- sequences and optionals (issue 19) ---

namespace {

// A sequence of `elem` tensors (optional: an optional of one).
void set_seq_type(pb::ValueInfoProto* v, const std::string& name, int elem, bool optional = false) {
  v->set_name(name);
  auto* t = v->mutable_type();
  if (optional) t = t->mutable_optional_type()->mutable_elem_type();
  t->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(elem);
}
void set_opt_type(pb::ValueInfoProto* v, const std::string& name, int elem) {
  v->set_name(name);
  v->mutable_type()->mutable_optional_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(elem);
}

sy::TensorData f32(std::vector<float> v, sy::Shape s) { return sy::TensorData::from(v, std::move(s)); }
sy::TensorData i64(std::vector<int64_t> v, sy::Shape s = {}) { return sy::TensorData::from(v, std::move(s)); }

sy::onnx::HostValueMap infer_values(const sy::onnx::Model& model, const sy::onnx::HostValueMap& in) {
  auto f = model.infer_values(in);
  REQUIRE(f.wait_for(kWait));
  return f.get();
}

// The message of the Error that `f` throws ("" if none).
template <class F>
std::string error_of(F f, sy::Errc* code = nullptr) {
  try {
    f();
  } catch (const sy::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

std::vector<std::vector<float>> floats_of(const sy::onnx::HostValue& v) {
  std::vector<std::vector<float>> out;
  for (const auto& t : v.items()) out.push_back(t.to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("onnx: SequenceInsert, Erase, At and Length follow ONNX's positions", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m(17);
  for (const char* n : {"a", "b", "c", "d"}) m.input(n, pb::TensorProto::FLOAT, {int64_t{1}});
  m.input("k", pb::TensorProto::INT64, {});
  m.init_i64("minus_one", {-1}, {});
  m.init_i64("minus_three", {-3}, {1});
  m.node("SequenceConstruct", {"a", "b"}, {"s"}, "make");
  m.node("SequenceInsert", {"s", "c"}, {"s2"}, "append");             // no position: at the end
  m.node("SequenceInsert", {"s2", "d", "minus_one"}, {"s3"}, "put");  // before the last
  m.node("SequenceErase", {"s3"}, {"s4"}, "drop_last");               // no position: the last
  m.node("SequenceErase", {"s4", "minus_three"}, {"s5"}, "drop_first");
  m.node("SequenceLength", {"s3"}, {"n"}, "count");
  m.node("SequenceAt", {"s3", "k"}, {"at"}, "pick");
  set_seq_type(m.g().add_output(), "s3", pb::TensorProto::FLOAT);
  set_seq_type(m.g().add_output(), "s5", pb::TensorProto::FLOAT);
  m.output("n", pb::TensorProto::INT64, {});
  m.output("at", pb::TensorProto::FLOAT, {int64_t{1}});
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    CHECK(model.outputs()[0].kind == sy::onnx::ValueKind::sequence);
    CHECK(model.outputs()[2].kind == sy::onnx::ValueKind::tensor);
    sy::onnx::HostValueMap in{{"a", f32({1}, {1})}, {"b", f32({2}, {1})}, {"c", f32({3}, {1})}, {"d", f32({4}, {1})}};
    for (auto [k, want] : std::vector<std::pair<int64_t, float>>{{-1, 3}, {2, 4}, {0, 1}, {-4, 1}}) {
      in.insert_or_assign("k", i64({k}));
      auto out = infer_values(model, in);
      CHECK(floats_of(out.at("s3")) == std::vector<std::vector<float>>{{1}, {2}, {4}, {3}});
      CHECK(floats_of(out.at("s5")) == std::vector<std::vector<float>>{{2}, {4}});
      CHECK(out.at("n").tensor().to_vector<int64_t>() == std::vector<int64_t>{4});
      CHECK(out.at("at").tensor().to_vector<float>() == std::vector<float>{want});
    }
    // A position past either end fails naming the node and the position.
    for (int64_t k : {4, -5}) {
      in.insert_or_assign("k", i64({k}));
      sy::Errc code{};
      auto what = error_of([&] { (void)infer_values(model, in); }, &code);
      CHECK(code == sy::Errc::index_out_of_range);
      CHECK_THAT(what,
                 Catch::Contains("node 'pick' (SequenceAt)") &&
                     Catch::Contains("position " + std::to_string(k) + " is out of range for a sequence of 4 tensors"));
    }
    // The tensor-only calls cannot return a sequence: refused, naming it.
    std::map<std::string, sy::TensorData> plain{{"a", f32({1}, {1})}};
    CHECK_THAT(error_of([&] { (void)model.run(plain); }),
               Catch::Contains("output 's3' is a sequence") && Catch::Contains("infer_values"));
  }
}

TEST_CASE("onnx: a sequence holds one dtype; an empty optional cannot be read", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  {
    Builder m(17);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
    m.input("i", pb::TensorProto::INT64, {int64_t{2}});
    m.node("SequenceConstruct", {"x", "i"}, {"s"}, "mixed");
    set_seq_type(m.g().add_output(), "s", pb::TensorProto::FLOAT);
    // ONNX binds every input to one type: refused at load.
    sy::Errc code{};
    CHECK_THAT(load_error(m.bytes(), rt.cpu(), &code),
               Catch::Contains("node 'mixed' (SequenceConstruct)") && Catch::Contains("input 'i' is INT64"));
    CHECK(code == sy::Errc::dtype_mismatch);
  }
  {
    // SequenceEmpty's dtype (FLOAT by default) holds for what is inserted.
    Builder m(17);
    m.input("i", pb::TensorProto::INT64, {int64_t{2}});
    m.node("SequenceEmpty", {}, {"e"}, "empty");
    m.node("SequenceInsert", {"e", "i"}, {"s"}, "add_ints");
    set_seq_type(m.g().add_output(), "s", pb::TensorProto::INT64);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
    CHECK_THAT(error_of([&] {
                 (void)model.infer_values({{"i", i64({1, 2}, {2})}});
               }),
               Catch::Contains("node 'add_ints' (SequenceInsert)") && Catch::Contains("input 1 ('i') is i64"));
  }
  {
    // A sequence input's elements are checked against its declared dtype;
    // a tensor, a sequence and none each only where declared.
    Builder m(17);
    set_seq_type(m.g().add_input(), "seq", pb::TensorProto::FLOAT);
    m.node("SequenceLength", {"seq"}, {"n"}, "count");
    m.output("n", pb::TensorProto::INT64, {});
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
    CHECK(model.inputs()[0].kind == sy::onnx::ValueKind::sequence);
    auto seq = sy::onnx::HostValue::sequence({f32({1}, {1}), i64({1}, {1})});
    CHECK_THAT(error_of([&] {
                 (void)model.infer_values({{"seq", seq}});
               }),
               Catch::Contains("input 'seq' element 1 must be f32, got i64"));
    CHECK_THAT(error_of([&] {
                 (void)model.infer_values({{"seq", f32({1}, {1})}});
               }),
               Catch::Contains("input 'seq' is a sequence, given a tensor"));
    CHECK_THAT(error_of([&] {
                 (void)model.infer_values({{"seq", sy::onnx::HostValue::none()}});
               }),
               Catch::Contains("input 'seq' is not optional, given none"));
    CHECK_THAT(error_of([&] {
                 (void)model.infer({{"seq", f32({1}, {1})}});
               }),
               Catch::Contains("input 'seq' is a sequence: give it through infer_values()"));
    auto out = infer_values(model, {{"seq", sy::onnx::HostValue::sequence({})}});
    CHECK(out.at("n").tensor().to_vector<int64_t>() == std::vector<int64_t>{0});
  }
  {
    // A tensor op given a sequence names the input rather than reading it.
    Builder m(17);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
    m.node("SequenceConstruct", {"x"}, {"s"}, "wrap");
    m.node("Relu", {"s"}, {"y"}, "act");
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
    CHECK_THAT(
        error_of([&] {
          (void)model.infer_values({{"x", f32({1, 2}, {2})}});
        }),
        Catch::Contains("node 'act' (Relu)") && Catch::Contains("input 0 ('s') is a sequence, expected a tensor"));
  }
}

TEST_CASE("onnx: Optional, OptionalHasElement and OptionalGetElement, given a tensor or none", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m(17);
  set_opt_type(m.g().add_input(), "opt", pb::TensorProto::FLOAT);
  m.node("OptionalHasElement", {"opt"}, {"has"}, "has");
  m.node("Identity", {"opt"}, {"same"}, "pass");
  auto& none = m.node("Optional", {}, {"nothing"}, "nothing");
  auto* tp = none.add_attribute();
  tp->set_name("type");
  tp->set_type(pb::AttributeProto::TYPE_PROTO);
  tp->mutable_tp()->mutable_tensor_type()->set_elem_type(pb::TensorProto::FLOAT);
  m.node("OptionalHasElement", {"nothing"}, {"has_nothing"}, "has_nothing");
  m.output("has", pb::TensorProto::BOOL, {});
  set_opt_type(m.g().add_output(), "same", pb::TensorProto::FLOAT);
  m.output("has_nothing", pb::TensorProto::BOOL, {});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  CHECK(model.inputs()[0].kind == sy::onnx::ValueKind::optional_tensor);

  auto out = infer_values(model, {{"opt", f32({5, 6}, {2})}});
  CHECK(out.at("has").tensor().to_vector<bool>() == std::vector<bool>{true});
  CHECK(out.at("same").tensor().to_vector<float>() == std::vector<float>{5, 6});
  CHECK(out.at("has_nothing").tensor().to_vector<bool>() == std::vector<bool>{false});
  out = infer_values(model, {{"opt", sy::onnx::HostValue::none()}});
  CHECK(out.at("has").tensor().to_vector<bool>() == std::vector<bool>{false});
  CHECK(out.at("same").is_none());
  CHECK_THROWS_AS(out.at("same").tensor(), sy::Error);

  // Reading an empty optional fails naming the node and the input.
  Builder g(17);
  set_opt_type(g.g().add_input(), "opt", pb::TensorProto::FLOAT);
  g.node("OptionalGetElement", {"opt"}, {"y"}, "unwrap");
  g.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
  auto get = sy::onnx::Model::load_bytes(g.bytes(), rt.cpu());
  CHECK(infer_values(get, {{"opt", f32({7, 8}, {2})}}).at("y").tensor().to_vector<float>() == std::vector<float>{7, 8});
  // (an optional tensor input also takes a plain tensor through infer())
  auto plain = get.infer({{"opt", f32({7, 8}, {2})}});
  REQUIRE(plain.wait_for(kWait));
  CHECK(plain.get().at("y").to_vector<float>() == std::vector<float>{7, 8});
  CHECK_THAT(
      error_of([&] {
        (void)get.infer_values({{"opt", sy::onnx::HostValue::none()}});
      }),
      Catch::Contains("node 'unwrap' (OptionalGetElement)") && Catch::Contains("input 0 ('opt') is an empty optional"));
}

TEST_CASE("onnx: SplitToSequence with and without split, and ConcatFromSequence back", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m(17);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  m.init_i64("two", {2}, {});
  m.init_i64("one_two", {1, 2}, {2});
  auto& ones = m.node("SplitToSequence", {"x"}, {"cols"}, "columns");  // [2] x 3: keepdims 0 drops the axis
  attr_i(ones, "axis", 1);
  attr_i(ones, "keepdims", 0);
  m.node("SplitToSequence", {"x"}, {"rows"}, "rows");                                  // [1, 3] x 2: axis 0, keepdims 1
  attr_i(m.node("SplitToSequence", {"x", "two"}, {"chunks"}, "chunks"), "axis", -1);   // [2, 2], [2, 1]
  attr_i(m.node("SplitToSequence", {"x", "one_two"}, {"parts"}, "parts"), "axis", 1);  // [2, 1], [2, 2]
  auto& stack = m.node("ConcatFromSequence", {"cols"}, {"stacked"}, "stack");          // new axis at the end: x again
  attr_i(stack, "axis", -1);
  attr_i(stack, "new_axis", 1);
  attr_i(m.node("ConcatFromSequence", {"parts"}, {"joined"}, "join"), "axis", 1);  // x again
  attr_i(m.node("ConcatFromSequence", {"rows"}, {"tall"}, "tall"), "axis", 0);     // x again
  for (const char* s : {"cols", "rows", "chunks", "parts"}) set_seq_type(m.g().add_output(), s, pb::TensorProto::FLOAT);
  for (const char* s : {"stacked", "joined", "tall"}) m.output(s, pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  for (const char* dev : {"cpu:0", "reference:0"}) {
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    auto out = infer_values(model, {{"x", f32(x, {2, 3})}});
    CHECK(floats_of(out.at("cols")) == std::vector<std::vector<float>>{{1, 4}, {2, 5}, {3, 6}});
    CHECK(out.at("cols").items()[0].shape == sy::Shape{2});
    CHECK(floats_of(out.at("rows")) == std::vector<std::vector<float>>{{1, 2, 3}, {4, 5, 6}});
    CHECK(out.at("rows").items()[1].shape == sy::Shape{1, 3});
    CHECK(floats_of(out.at("chunks")) == std::vector<std::vector<float>>{{1, 2, 4, 5}, {3, 6}});
    CHECK(out.at("chunks").items()[1].shape == sy::Shape{2, 1});
    CHECK(floats_of(out.at("parts")) == std::vector<std::vector<float>>{{1, 4}, {2, 3, 5, 6}});
    CHECK(out.at("parts").items()[1].shape == sy::Shape{2, 2});
    for (const char* s : {"stacked", "joined", "tall"}) {
      CHECK(out.at(s).tensor().shape == sy::Shape{2, 3});
      CHECK(out.at(s).tensor().to_vector<float>() == x);
    }
  }
  // Split sizes must cover the axis; ConcatFromSequence needs an element.
  Builder bad(17);
  bad.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  bad.init_i64("one_one", {1, 1}, {2});
  attr_i(bad.node("SplitToSequence", {"x", "one_one"}, {"parts"}, "short"), "axis", 1);
  set_seq_type(bad.g().add_output(), "parts", pb::TensorProto::FLOAT);
  auto model = sy::onnx::Model::load_bytes(bad.bytes(), rt.cpu());
  CHECK_THAT(
      error_of([&] {
        (void)model.infer_values({{"x", f32(x, {2, 3})}});
      }),
      Catch::Contains("node 'short' (SplitToSequence)") && Catch::Contains("split sizes add up to 2, the axis has 3"));
  Builder empty(17);
  empty.node("SequenceEmpty", {}, {"e"}, "none_yet");
  attr_i(empty.node("ConcatFromSequence", {"e"}, {"y"}, "cat"), "axis", 0);
  empty.output("y", pb::TensorProto::FLOAT, {int64_t{0}});
  auto cat_model = sy::onnx::Model::load_bytes(empty.bytes(), rt.cpu());
  CHECK_THAT(error_of([&] { (void)cat_model.infer_values({}); }),
             Catch::Contains("node 'cat' (ConcatFromSequence)") && Catch::Contains("'e') is an empty sequence"));
}

TEST_CASE("onnx: SequenceMap over two sequences and a tensor, with two outputs", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // out[k] = a[k] + b[k] + t, shapes[k] = Shape(a[k]).
  Builder m(17);
  set_seq_type(m.g().add_input(), "a", pb::TensorProto::FLOAT);
  set_seq_type(m.g().add_input(), "b", pb::TensorProto::FLOAT);
  m.input("t", pb::TensorProto::FLOAT, {});
  Body body("add_three");
  body.input("ai", pb::TensorProto::FLOAT, {std::string("n")});
  body.input("bi", pb::TensorProto::FLOAT, {std::string("n")});
  body.input("ti", pb::TensorProto::FLOAT, {});
  body.node("Add", {"ai", "bi"}, {"ab"});
  body.node("Add", {"ab", "ti"}, {"sum"});
  body.node("Shape", {"ai"}, {"shape"});
  body.output("sum", pb::TensorProto::FLOAT, {std::string("n")});
  body.output("shape", pb::TensorProto::INT64, {int64_t{1}});
  attr_g(m.node("SequenceMap", {"a", "b", "t"}, {"sums", "shapes"}, "map"), "body", body);
  set_seq_type(m.g().add_output(), "sums", pb::TensorProto::FLOAT);
  set_seq_type(m.g().add_output(), "shapes", pb::TensorProto::INT64);
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto a = sy::onnx::HostValue::sequence({f32({1, 2}, {2}), f32({3}, {1})});
  auto b = sy::onnx::HostValue::sequence({f32({10, 20}, {2}), f32({30}, {1})});
  auto out = infer_values(model, {{"a", a}, {"b", b}, {"t", f32({100}, {})}});
  CHECK(floats_of(out.at("sums")) == std::vector<std::vector<float>>{{111, 122}, {133}});
  REQUIRE(out.at("shapes").items().size() == 2);
  CHECK(out.at("shapes").items()[0].to_vector<int64_t>() == std::vector<int64_t>{2});
  CHECK(out.at("shapes").items()[1].to_vector<int64_t>() == std::vector<int64_t>{1});
  // Sequences of different lengths fail naming the node and the input.
  auto short_b = sy::onnx::HostValue::sequence({f32({10, 20}, {2})});
  CHECK_THAT(
      error_of([&] {
        (void)model.infer_values({{"a", a}, {"b", short_b}, {"t", f32({100}, {})}});
      }),
      Catch::Contains("node 'map' (SequenceMap)") && Catch::Contains("input 1 ('b') holds 1 tensors, input 0 holds 2"));
  // An empty sequence maps to empty sequences.
  auto none = infer_values(
      model,
      {{"a", sy::onnx::HostValue::sequence({})}, {"b", sy::onnx::HostValue::sequence({})}, {"t", f32({100}, {})}});
  CHECK(none.at("sums").items().empty());
}

TEST_CASE("onnx: sequences cross If branches and Loop-carried values", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // s = c ? [x] : SplitToSequence(x); then a Loop appends x * i for i < M
  // to s; y = ConcatFromSequence(s) along axis 0.
  Builder m(17);
  m.input("c", pb::TensorProto::BOOL, {});
  m.input("M", pb::TensorProto::INT64, {});
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
  Body then_b("whole"), else_b("split");
  then_b.node("SequenceConstruct", {"x"}, {"t"});
  set_seq_type(then_b.g.add_output(), "t", pb::TensorProto::FLOAT);
  else_b.node("SplitToSequence", {"x"}, {"e"});
  set_seq_type(else_b.g.add_output(), "e", pb::TensorProto::FLOAT);
  auto& branch = m.node("If", {"c"}, {"s"}, "choose");
  attr_g(branch, "then_branch", then_b);
  attr_g(branch, "else_branch", else_b);
  Body body("append");
  body.input("i", pb::TensorProto::INT64, {});
  body.input("cond_in", pb::TensorProto::BOOL, {});
  set_seq_type(body.g.add_input(), "seq_in", pb::TensorProto::FLOAT);
  body.node("Identity", {"cond_in"}, {"cond_out"});
  auto& cast = body.node("Cast", {"i"}, {"fi"});
  attr_i(cast, "to", pb::TensorProto::FLOAT);
  body.node("Mul", {"x", "fi"}, {"xi"});
  body.node("SequenceInsert", {"seq_in", "xi"}, {"seq_out"});
  body.output("cond_out", pb::TensorProto::BOOL, {});
  set_seq_type(body.g.add_output(), "seq_out", pb::TensorProto::FLOAT);
  attr_g(m.node("Loop", {"M", "", "s"}, {"grown"}, "grow"), "body", body);
  attr_i(m.node("ConcatFromSequence", {"grown"}, {"y"}, "cat"), "axis", 0);
  set_seq_type(m.g().add_output(), "grown", pb::TensorProto::FLOAT);
  m.output("y", pb::TensorProto::FLOAT, {std::string("n")});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto x = f32({1, 2}, {2});
  auto out = infer_values(model, {{"c", flag(true)}, {"M", i64({3})}, {"x", x}});
  CHECK(floats_of(out.at("grown")) == std::vector<std::vector<float>>{{1, 2}, {0, 0}, {1, 2}, {2, 4}});
  CHECK(out.at("y").tensor().to_vector<float>() == std::vector<float>{1, 2, 0, 0, 1, 2, 2, 4});
  out = infer_values(model, {{"c", flag(false)}, {"M", i64({1})}, {"x", x}});
  CHECK(floats_of(out.at("grown")) == std::vector<std::vector<float>>{{1}, {2}, {0, 0}});
  CHECK(out.at("y").tensor().to_vector<float>() == std::vector<float>{1, 2, 0, 0});
}

/// Serializes `msg` to dir/name (as the backend tests' .pb files); its path.
std::string write_message(const std::filesystem::path& dir, const std::string& name,
                          const google::protobuf::MessageLite& msg) {
  std::ofstream out(dir / name, std::ios::binary);
  REQUIRE(msg.SerializeToOstream(&out));
  return (dir / name).string();
}

TEST_CASE("onnx: read_value_proto reads SequenceProto and OptionalProto files", "[onnx]") {
  const auto dir = std::filesystem::temp_directory_path() / ("sy_onnx_values_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const google::protobuf::MessageLite& msg) {
    return write_message(dir, name, msg);
  };
  pb::TensorProto t;
  t.set_data_type(pb::TensorProto::FLOAT);
  t.add_dims(2);
  t.add_float_data(1);
  t.add_float_data(2);
  pb::SequenceProto seq;
  seq.set_elem_type(pb::SequenceProto::TENSOR);
  *seq.add_tensor_values() = t;
  *seq.add_tensor_values() = t;
  auto v = sy::onnx::read_value_proto(write("seq.pb", seq), sy::onnx::ValueKind::sequence);
  CHECK(floats_of(v) == std::vector<std::vector<float>>{{1, 2}, {1, 2}});
  pb::OptionalProto opt;
  opt.set_elem_type(pb::OptionalProto::TENSOR);
  *opt.mutable_tensor_value() = t;
  v = sy::onnx::read_value_proto(write("opt.pb", opt), sy::onnx::ValueKind::optional_tensor);
  CHECK(v.tensor().to_vector<float>() == std::vector<float>{1, 2});
  opt.clear_tensor_value();
  CHECK(sy::onnx::read_value_proto(write("none.pb", opt), sy::onnx::ValueKind::optional_tensor).is_none());
  *opt.mutable_sequence_value() = seq;
  opt.set_elem_type(pb::OptionalProto::SEQUENCE);
  CHECK(sy::onnx::read_value_proto(write("optseq.pb", opt), sy::onnx::ValueKind::optional_sequence).items().size() ==
        2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("onnx: read_tensor_proto reads UINT16 bit patterns as the declared 16-bit float", "[onnx]") {
  const auto dir = std::filesystem::temp_directory_path() / ("sy_onnx_u16_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const pb::TensorProto& msg) { return write_message(dir, name, msg); };
  // 0x3f80 is bf16 1.0, 0xc040 bf16 -3.0; as f16 0x3c00 is 1.0.
  pb::TensorProto raw;
  raw.set_data_type(pb::TensorProto::UINT16);
  raw.add_dims(2);
  const uint16_t bits[] = {0x3f80, 0xc040};
  raw.set_raw_data(std::string(reinterpret_cast<const char*>(bits), sizeof bits));
  const auto raw_path = write("raw.pb", raw);
  auto bf = sy::onnx::read_tensor_proto(raw_path, sy::DType::bf16);
  CHECK(bf.dtype == sy::DType::bf16);
  CHECK(bf.shape == sy::Shape{2});
  CHECK(bf.to_vector<float>() == std::vector<float>{1.0f, -3.0f});
  pb::TensorProto field;  // the same patterns in int32_data, as ONNX's NumPy helper writes them
  field.set_data_type(pb::TensorProto::UINT16);
  field.add_dims(1);
  field.add_int32_data(0x3c00);
  auto half = sy::onnx::read_tensor_proto(write("field.pb", field), sy::DType::f16);
  CHECK(half.dtype == sy::DType::f16);
  CHECK(half.to_vector<float>() == std::vector<float>{1.0f});
  // Without a declared type UINT16 stays a dtype Switchyard lacks; any other
  // mismatch names both types.
  CHECK_THROWS_WITH(sy::onnx::read_tensor_proto(raw_path), Catch::Contains("UINT16"));
  try {
    (void)sy::onnx::read_tensor_proto(raw_path, sy::DType::f32);
    FAIL("a UINT16 file read as f32 was accepted");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains("UINT16") && Catch::Contains("f32"));
  }
  pb::TensorProto f;
  f.set_data_type(pb::TensorProto::FLOAT);
  f.add_dims(1);
  f.add_float_data(2.5f);
  CHECK(sy::onnx::read_tensor_proto(write("f.pb", f), sy::DType::f32).to_vector<float>() == std::vector<float>{2.5f});
  std::filesystem::remove_all(dir);
}

TEST_CASE("onnx: Dropout in training mode is the identity at ratio 0 and inference mode ignores the ratio", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  m.input("ratio", pb::TensorProto::FLOAT, {});
  m.input("training", pb::TensorProto::BOOL, {});
  m.node("Dropout", {"x", "ratio", "training"}, {"y", "mask"}, "drop");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  m.output("mask", pb::TensorProto::BOOL, {int64_t{2}, int64_t{3}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device("cpu:0"));
  const auto x = sy::TensorData::from(std::vector<float>{1, -2, 3, -4, 5, std::numeric_limits<float>::quiet_NaN()},
                                      sy::Shape{2, 3});
  auto training = [](bool b) { return sy::TensorData::from(std::vector<bool>{b}, {}); };
  auto ratio = [](float r) { return sy::TensorData::from(std::vector<float>{r}, {}); };
  auto run = [&](float r, bool train) {
    auto f = model.infer({{"x", x}, {"ratio", ratio(r)}, {"training", training(train)}});
    REQUIRE(f.wait_for(kWait));
    return f.get();
  };
  auto out = run(0, true);
  const auto y = out.at("y").to_vector<float>();
  CHECK(std::vector<float>(y.begin(), y.begin() + 5) == std::vector<float>{1, -2, 3, -4, 5});
  CHECK(std::isnan(y[5]));
  CHECK(out.at("mask").to_vector<int>() == std::vector<int>(6, 1));
  // Inference mode ignores the ratio.
  CHECK(run(0.5f, false).at("mask").to_vector<int>() == std::vector<int>(6, 1));
  // Above 0 it draws (the next test); a dropped NaN stays NaN (mask * x).
  const auto dropped = run(0.25f, true);
  CHECK(std::isnan(dropped.at("y").to_vector<float>()[5]));
}

TEST_CASE("onnx: a sequence input keys the plan by its length and element shapes", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // n = SequenceLength(seq) is host arithmetic a plan keeps: it must follow
  // the sequence given, run after run.
  Builder m(17);
  set_seq_type(m.g().add_input(), "seq", pb::TensorProto::FLOAT);
  m.node("SequenceLength", {"seq"}, {"n"}, "count");
  m.node("SequenceAt", {"seq", "n_minus_one"}, {"last"}, "last");
  m.init_i64("one", {1}, {});
  m.node("Sub", {"n", "one"}, {"n_minus_one"}, "minus");
  m.node("Shape", {"last"}, {"last_shape"}, "shape");
  auto& cat = m.node("ConcatFromSequence", {"seq"}, {"stacked"}, "stack");
  attr_i(cat, "axis", 0);
  attr_i(cat, "new_axis", 1);
  m.output("n", pb::TensorProto::INT64, {});
  m.output("last_shape", pb::TensorProto::INT64, {int64_t{1}});
  m.output("stacked", pb::TensorProto::FLOAT, {std::string("n"), std::string("k")});
  // (nodes out of order above: sort them as ONNX requires)
  auto* nodes = m.g().mutable_node();
  std::swap(*nodes->Mutable(1), *nodes->Mutable(2));
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto two = sy::onnx::HostValue::sequence({f32({1, 2}, {2}), f32({3, 4}, {2})});
  auto three = sy::onnx::HostValue::sequence({f32({1}, {1}), f32({2}, {1}), f32({3}, {1})});
  for (int round = 0; round < 2; ++round) {
    auto out = infer_values(model, {{"seq", two}});
    CHECK(out.at("n").tensor().to_vector<int64_t>() == std::vector<int64_t>{2});
    CHECK(out.at("last_shape").tensor().to_vector<int64_t>() == std::vector<int64_t>{2});
    CHECK(out.at("stacked").tensor().shape == sy::Shape{2, 2});
    CHECK(out.at("stacked").tensor().to_vector<float>() == std::vector<float>{1, 2, 3, 4});
    out = infer_values(model, {{"seq", three}});
    CHECK(out.at("n").tensor().to_vector<int64_t>() == std::vector<int64_t>{3});
    CHECK(out.at("last_shape").tensor().to_vector<int64_t>() == std::vector<int64_t>{1});
    CHECK(out.at("stacked").tensor().to_vector<float>() == std::vector<float>{1, 2, 3});
  }
  CHECK(model.cached_plans() == 2);
  // Stacked elements must agree in shape; the error names the node.
  auto ragged = sy::onnx::HostValue::sequence({f32({1, 2}, {2}), f32({3}, {1})});
  CHECK_THAT(error_of([&] {
               (void)model.infer_values({{"seq", ragged}});
             }),
             Catch::Contains("node 'stack' (ConcatFromSequence)") &&
                 Catch::Contains("element 1 has shape [1], element 0 [2]"));
  // A default HostValue is an empty optional (so a map's operator[] works).
  sy::onnx::HostValueMap map;
  CHECK(map["anything"].is_none());
}

namespace {

// nn.LayerNorm over the last axis as PyTorch exports it below opset 17:
// ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul, Add, with
// the exponent and epsilon as Constant nodes and the bias aliased through
// Identity. `leak` also makes the centred values a graph output (so the
// pattern must not be fused).
std::string layer_norm_model(bool leak) {
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}, int64_t{4}});
  m.init("gamma", {0.5f, 1.0f, -2.0f, 3.0f}, {4});
  m.init("beta0", {0.25f, 0.0f, -1.0f, 2.0f}, {4});
  m.node("Identity", {"beta0"}, {"beta"});
  auto constant = [&](const std::string& name, float v) {
    auto& c = m.node("Constant", {}, {name});
    auto* a = c.add_attribute();
    a->set_name("value");
    a->set_type(pb::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(pb::TensorProto::FLOAT);
    a->mutable_t()->add_float_data(v);
  };
  attr_ints(m.node("ReduceMean", {"x"}, {"mean"}, "ln/ReduceMean"), "axes", {-1});
  m.node("Sub", {"x", "mean"}, {"d"}, "ln/Sub");
  constant("two", 2.0f);
  m.node("Pow", {"d", "two"}, {"d2"}, "ln/Pow");
  attr_ints(m.node("ReduceMean", {"d2"}, {"var"}, "ln/ReduceMean_1"), "axes", {-1});
  constant("eps", 1e-5f);
  m.node("Add", {"var", "eps"}, {"ve"}, "ln/Add");
  m.node("Sqrt", {"ve"}, {"sd"}, "ln/Sqrt");
  m.node("Div", {"d", "sd"}, {"n"}, "ln/Div");
  m.node("Mul", {"n", "gamma"}, {"s"}, "ln/Mul");
  m.node("Add", {"s", "beta"}, {"y"}, "ln/Add_1");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}, int64_t{4}});
  if (leak) m.output("d", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}, int64_t{4}});
  return m.bytes();
}

// Device ops of one run of `model` (output "y") after its plan exists,
// uploads and reads included.
uint64_t ops_per_run(const sy::onnx::Model& model, const sy::onnx::DataMap& in, const sy::Device& d) {
  (void)run_doubles(model, in, "y");
  REQUIRE(d.sync().wait_for(kWait));
  auto before = d.stats();
  REQUIRE(before.wait_for(kWait));
  (void)run_doubles(model, in, "y");
  REQUIRE(d.sync().wait_for(kWait));
  auto after = d.stats();
  REQUIRE(after.wait_for(kWait));
  return after.get().ops_executed - before.get().ops_executed;
}

std::vector<double> layer_norm_by_hand(const std::vector<float>& x) {
  const double gamma[] = {0.5, 1.0, -2.0, 3.0}, beta[] = {0.25, 0.0, -1.0, 2.0};
  std::vector<double> y;
  for (size_t r = 0; r < x.size() / 4; ++r) {
    double mean = 0, var = 0;
    for (size_t c = 0; c < 4; ++c) mean += x[r * 4 + c] / 4.0;
    for (size_t c = 0; c < 4; ++c) var += (x[r * 4 + c] - mean) * (x[r * 4 + c] - mean) / 4.0;
    for (size_t c = 0; c < 4; ++c) y.push_back((x[r * 4 + c] - mean) / std::sqrt(var + 1e-5) * gamma[c] + beta[c]);
  }
  return y;
}

}  // namespace

TEST_CASE("onnx: an exported layer norm runs as one op unless its parts are read elsewhere", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "cpu:1", "reference:0"}});
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 1.3f) * 4.0f + (i >= 12 ? 100.0f : 0);
  const auto want = layer_norm_by_hand(x);
  sy::onnx::DataMap in{{"x", sy::TensorData::from(x, {2, 3, 4})}};
  auto ops_of_a_run = [&](const sy::onnx::Model& model, const sy::Device& d) { return ops_per_run(model, in, d); };
  uint64_t fused_ops = 0;
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    const sy::Device d = rt.device(dev);
    auto fused = sy::onnx::Model::load_bytes(layer_norm_model(false), d);
    CHECK(fused.num_nodes() == 12);  // the model's own nodes, whatever runs
    auto y = run_doubles(fused, in, "y");
    REQUIRE(y.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CHECK(y[i] == Approx(want[i]).margin(1e-4));
    fused_ops = ops_of_a_run(fused, d);
    // With the centred values a graph output too, the nodes run one by one,
    // with the same values.
    auto leaky = sy::onnx::Model::load_bytes(layer_norm_model(true), d);
    auto y2 = run_doubles(leaky, in, "y");
    REQUIRE(y2.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CHECK(y2[i] == Approx(want[i]).margin(1e-4));
    CHECK(ops_of_a_run(leaky, d) >= fused_ops + 8);
  }
  CHECK(fused_ops <= 4);
  // A pipeline whose stages split the pattern runs it node by node, each
  // part on its stage's device.
  auto split = sy::onnx::Model::load_bytes(layer_norm_model(false), {{rt.device("cpu:0"), 0}, {rt.device("cpu:1"), 7}});
  auto y3 = run_doubles(split, in, "y");
  REQUIRE(y3.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(y3[i] == Approx(want[i]).margin(1e-4));
  CHECK(ops_of_a_run(split, rt.device("cpu:1")) >= 4);
}

namespace {

// Attention as PyTorch 1.13 exports nn.MultiheadAttention's core: q scaled
// by a Div, k transposed by a Transpose, MatMul, Softmax over the last axis,
// MatMul with v. q [2, 3, 5, 4], k [2, 3, 6, 4] (kt [2, 3, 4, 6]: perm 0 1 3
// 2), v [2, 3, 6, 2]; `k_batch` makes k and v [1, 3, ...] (broadcast by
// MatMul, which scaled_dot_product_attention does not take); `leak` makes
// the scores a graph output too (so nothing may be fused); `opset` and
// `axis` (-2: none given) vary Softmax's axis rules.
std::string attention_model(int64_t k_batch, bool leak, int64_t opset = 13, int64_t axis = -1) {
  Builder m(opset);
  m.input("q", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}, int64_t{5}, int64_t{4}});
  m.input("k", pb::TensorProto::FLOAT, {k_batch, int64_t{3}, int64_t{6}, int64_t{4}});
  m.input("v", pb::TensorProto::FLOAT, {k_batch, int64_t{3}, int64_t{6}, int64_t{2}});
  m.init("c", {2.0f}, {});
  m.node("Div", {"q", "c"}, {"qs"}, "att/Div");
  attr_ints(m.node("Transpose", {"k"}, {"kt"}, "att/Transpose"), "perm", {0, 1, 3, 2});
  m.node("MatMul", {"qs", "kt"}, {"scores"}, "att/MatMul");
  auto& sm = m.node("Softmax", {"scores"}, {"p"}, "att/Softmax");
  if (axis != -2) attr_i(sm, "axis", axis);
  m.node("MatMul", {"p", "v"}, {"y"}, "att/MatMul_1");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}, int64_t{5}, int64_t{2}});
  if (leak) m.output("scores", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}, int64_t{5}, int64_t{6}});
  return m.bytes();
}

// softmax(q / 2 k^T) v in double, k and v broadcast over the first axis
// when they have one entry.
std::vector<double> attention_by_hand(const std::vector<float>& q, const std::vector<float>& k,
                                      const std::vector<float>& v, int64_t k_batch) {
  std::vector<double> y;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t i = 0; i < 5; ++i) {
        const int64_t kb = (k_batch == 1 ? 0 : b) * 3 + h;
        std::vector<double> s(6);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < 6; ++j) {
          for (int64_t e = 0; e < 4; ++e)
            s[j] += static_cast<double>(q[((b * 3 + h) * 5 + i) * 4 + e] / 2.0f) * k[(kb * 6 + j) * 4 + e];
          mx = std::max(mx, s[j]);
        }
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < 2; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < 6; ++j) acc += s[j] / sum * v[(kb * 6 + j) * 2 + e];
          y.push_back(acc);
        }
      }
  return y;
}

}  // namespace

TEST_CASE("onnx: an exported attention runs as one op where its shapes allow and keeps its values", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  auto fill = [](size_t n, double f) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::sin(static_cast<double>(i) * f) * 3.0);
    return x;
  };
  for (int64_t k_batch : {int64_t{2}, int64_t{1}}) {
    const auto q = fill(120, 0.7), k = fill(static_cast<size_t>(k_batch) * 72, 1.3),
               v = fill(static_cast<size_t>(k_batch) * 36, 0.4);
    const auto want = attention_by_hand(q, k, v, k_batch);
    sy::onnx::DataMap in{{"q", sy::TensorData::from(q, {2, 3, 5, 4})},
                         {"k", sy::TensorData::from(k, {k_batch, 3, 6, 4})},
                         {"v", sy::TensorData::from(v, {k_batch, 3, 6, 2})}};
    for (const char* dev : {"cpu:0", "reference:0"}) {
      INFO(dev << ", k batch " << k_batch);
      const sy::Device d = rt.device(dev);
      auto ops_of_a_run = [&](const sy::onnx::Model& model) { return ops_per_run(model, in, d); };
      auto fused = sy::onnx::Model::load_bytes(attention_model(k_batch, false), d);
      CHECK(fused.num_nodes() == 5);
      auto leaky = sy::onnx::Model::load_bytes(attention_model(k_batch, true), d);
      for (auto* model : {&fused, &leaky}) {
        auto y = run_doubles(*model, in, "y");
        REQUIRE(y.size() == want.size());
        for (size_t i = 0; i < want.size(); ++i) CHECK(y[i] == Approx(want[i]).margin(1e-5));
      }
      // Fused: Div, the key's permute, one attention; node by node Div,
      // Transpose, MatMul, Softmax, MatMul (and the scores' read).
      const auto fused_ops = ops_of_a_run(fused), leaky_ops = ops_of_a_run(leaky);
      if (k_batch == 2)
        CHECK(fused_ops + 2 <= leaky_ops);
      else  // broadcast k and v: the three ops, as node by node
        CHECK(fused_ops + 1 >= leaky_ops);
    }
  }
  // Softmax's axis: -1 given at any opset is the last axis; before opset 13
  // the default (1) is not, so that model keeps its nodes, and its values.
  sy::onnx::DataMap in{{"q", sy::TensorData::from(fill(120, 0.7), {2, 3, 5, 4})},
                       {"k", sy::TensorData::from(fill(144, 1.3), {2, 3, 6, 4})},
                       {"v", sy::TensorData::from(fill(72, 0.4), {2, 3, 6, 2})}};
  const auto last_axis = run_doubles(sy::onnx::Model::load_bytes(attention_model(2, false), rt.cpu()), in, "y");
  CHECK(run_doubles(sy::onnx::Model::load_bytes(attention_model(2, false, 11, -1), rt.cpu()), in, "y") == last_axis);
  CHECK(run_doubles(sy::onnx::Model::load_bytes(attention_model(2, false, 11, -2), rt.cpu()), in, "y") ==
        run_doubles(sy::onnx::Model::load_bytes(attention_model(2, true, 11, -2), rt.cpu()), in, "y"));
}

// A run's device values are let go after their last reader, not at the end
// of the run: the drop then follows the last use in the same batch, so the
// device knows the value dies there (and may fuse the chain or write in
// place) even where the batch is sent before the run ends, as when a heavy
// op goes early to an idle device. The trace marks such an input "(last use)".
TEST_CASE("onnx: a value's drop follows its last reader so its batch knows it dies there", "[onnx]") {
  const auto path =
      std::filesystem::temp_directory_path() / ("sy_onnx_release_" + std::to_string(::getpid()) + ".json");
  {
    sy::RuntimeOptions o{.devices = {"cpu:0"}};
    o.trace_path = path.string();
    // The flusher sends whatever waited a flush interval: on a loaded
    // machine (the sanitizer suite on two cores) it could send the relu's
    // batch while the client thread, preempted, had yet to drop h (1 run
    // in 4 under two parallel copies). Here only the client sends.
    o.flush_interval = std::chrono::seconds(10);
    sy::Runtime rt(o);
    Builder m;
    m.input("x", pb::TensorProto::FLOAT, {int64_t{64}, int64_t{128}});
    m.init("w", std::vector<float>(128 * 256, 0.01f), {128, 256});
    m.node("MatMul", {"x", "w"}, {"h"}, "mm");                        // 2M multiply-adds: goes early to the idle device
    m.node("Relu", {"h"}, {"r"}, "relu");                             // h's last reader
    attr_i(m.node("ReduceSum", {"r"}, {"y"}, "sum"), "keepdims", 0);  // sends the batch so far
    m.output("y", pb::TensorProto::FLOAT, {});
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
    sy::onnx::DataMap in{{"x", sy::TensorData::from(std::vector<float>(64 * 128, 1.0f), {64, 128})}};
    for (int run = 0; run < 3; ++run) {
      const auto y = run_doubles(model, in, "y");
      REQUIRE(y.size() == 1);
      CHECK(y[0] == Approx(64.0 * 256 * 128 * 0.01f).epsilon(1e-4));
    }
  }
  std::ifstream file(path);
  const std::string trace((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  // Every run's relu took h as its last use (whether or not it was fused
  // into the matmul's store).
  size_t relus = 0, last_uses = 0;
  for (size_t at = trace.find("\"name\":\"relu\""); at != std::string::npos;
       at = trace.find("\"name\":\"relu\"", at + 1)) {
    ++relus;
    const size_t end = trace.find('}', at);
    if (trace.substr(at, end - at).find("[64, 256] f32 (last use)") != std::string::npos) ++last_uses;
  }
  CHECK(relus == 3);
  CHECK(last_uses == 3);
}

// Fused nodes have no schema: the type constraints of the nodes they stand
// for are still checked at load, so an integer Softmax is refused as it is
// unfused.
TEST_CASE("onnx: a fused pattern that breaks ONNX's type constraints is refused at load", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  m.input("a", pb::TensorProto::INT64, {int64_t{2}, int64_t{3}});
  m.input("b", pb::TensorProto::INT64, {int64_t{3}, int64_t{4}});
  m.input("v", pb::TensorProto::INT64, {int64_t{4}, int64_t{2}});
  m.node("MatMul", {"a", "b"}, {"s"}, "scores");
  attr_i(m.node("Softmax", {"s"}, {"p"}, "probs"), "axis", -1);
  m.node("MatMul", {"p", "v"}, {"y"}, "out");
  m.output("y", pb::TensorProto::INT64, {int64_t{2}, int64_t{2}});
  sy::Errc code{};
  CHECK_THAT(error_of([&] { (void)sy::onnx::Model::load_bytes(m.bytes(), rt.cpu()); }, &code),
             Catch::Contains("node 'probs' (Softmax)") && Catch::Contains("INT64"));
  CHECK(code == sy::Errc::dtype_mismatch);
}

TEST_CASE("onnx: a model's own node of the loader's fused domain is refused", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m;
  auto* op = m.model.add_opset_import();
  op->set_domain("ai.switchyard.fused");
  op->set_version(1);
  m.input("a", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}});
  m.node("Attention", {"a", "a", "a"}, {"y"}, "mine").set_domain("ai.switchyard.fused");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}});
  sy::Errc code{};
  CHECK_THAT(error_of([&] { (void)sy::onnx::Model::load_bytes(m.bytes(), rt.cpu()); }, &code),
             Catch::Contains("node 'mine' (Attention)") && Catch::Contains("domain 'ai.switchyard.fused'"));
  CHECK(code == sy::Errc::unsupported);
}

// --- models a hostile or broken exporter writes (black-box audit, session 21) ---

TEST_CASE("onnx: a zero stride dilation or blocksize is refused naming the node instead of crashing libonnx",
          "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  struct Case {
    const char* op;
    const char* attribute;
  };
  for (const Case& c :
       {Case{"Conv", "strides"}, Case{"Conv", "dilations"}, Case{"MaxPool", "strides"}, Case{"AveragePool", "strides"},
        Case{"LpPool", "strides"}, Case{"DepthToSpace", "blocksize"}, Case{"SpaceToDepth", "blocksize"}}) {
    INFO(c.op << " " << c.attribute);
    Builder m(13);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{4}, int64_t{4}, int64_t{4}});
    const bool conv = std::string(c.op) == "Conv";
    if (conv) m.init("w", std::vector<float>(4 * 4 * 9, 0.5f), {4, 4, 3, 3});
    auto& n = m.node(c.op, conv ? std::vector<std::string>{"x", "w"} : std::vector<std::string>{"x"}, {"y"}, "bad");
    if (std::string(c.attribute) == "blocksize") {
      attr_i(n, "blocksize", 0);
    } else {
      if (!conv) attr_ints(n, "kernel_shape", {2, 2});
      attr_ints(n, c.attribute, {0, 0});
    }
    m.output("y", pb::TensorProto::FLOAT, {});
    sy::Errc code{};
    CHECK_THAT(load_error(m.bytes(), rt.cpu(), &code),
               Catch::Contains("node 'bad'") && Catch::Contains(c.attribute) && Catch::Contains("must be positive"));
    CHECK(code == sy::Errc::invalid_argument);
  }
}

namespace {
// Add(x, w) with w [6] f32 from an external file: location and entries as given.
std::string external_model(const std::string& location, std::vector<std::pair<std::string, std::string>> extra) {
  Builder m(13);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{6}});
  auto* t = m.g().add_initializer();
  t->set_name("w");
  t->set_data_type(pb::TensorProto::FLOAT);
  t->add_dims(6);
  t->set_data_location(pb::TensorProto::EXTERNAL);
  extra.insert(extra.begin(), {"location", location});
  for (const auto& [k, v] : extra) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
  m.node("Add", {"x", "w"}, {"y"});
  m.output("y", pb::TensorProto::FLOAT, {int64_t{6}});
  return m.bytes();
}
}  // namespace

TEST_CASE("onnx: external data entries that lie or point outside the model folder are refused", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  const auto root = std::filesystem::temp_directory_path() / ("sy_onnx_ext_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "model");
  std::filesystem::create_directories(root / "secret");
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() { std::filesystem::remove_all(p); }
  } cleanup{root};
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  for (const char* file : {"model/w.bin", "secret/w.bin"}) {
    std::ofstream f(root / file, std::ios::binary);
    f.write(reinterpret_cast<const char*>(w.data()), 24);
  }
  std::filesystem::create_symlink(root / "secret/w.bin", root / "model/link.bin");
  std::filesystem::create_symlink("w.bin", root / "model/inside_link.bin");
  std::filesystem::create_directories(root / "model/sub");
  REQUIRE(::mkfifo((root / "model/fifo").c_str(), 0600) == 0);
  const std::string dir = (root / "model").string();
  auto error_of = [&](const std::string& bytes) {
    try {
      (void)sy::onnx::Model::load_bytes(bytes, rt.cpu(), dir);
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string();
  };
  // What is fine loads: the file itself, with an offset and length, and a link within the folder.
  auto x = sy::TensorData::from(std::vector<float>(6, 0.5f), {6});
  for (const auto& bytes : {external_model("w.bin", {}), external_model("w.bin", {{"offset", "0"}, {"length", "24"}}),
                            external_model("inside_link.bin", {})}) {
    auto model = sy::onnx::Model::load_bytes(bytes, rt.cpu(), dir);
    CHECK(run_doubles(model, {{"x", x}}, "y") == std::vector<double>{1.5, 2.5, 3.5, 4.5, 5.5, 6.5});
  }
  CHECK_THAT(error_of(external_model("link.bin", {})), Catch::Contains("outside the model's folder"));
  CHECK_THAT(error_of(external_model("fifo", {})), Catch::Contains("not a regular file"));
  CHECK_THAT(error_of(external_model("sub", {})), Catch::Contains("not a regular file"));
  CHECK_THAT(error_of(external_model("missing.bin", {})), Catch::Contains("no such file"));
  for (const char* junk : {"abc", "-24", "+1", "18446744073709551616", " 1", ""}) {
    INFO("offset '" << junk << "'");
    CHECK_THAT(error_of(external_model("w.bin", {{"offset", junk}})), Catch::Contains("not a non-negative decimal"));
    CHECK_THAT(error_of(external_model("w.bin", {{"length", junk}})), Catch::Contains("not a non-negative decimal"));
  }
  for (const auto& [offset, length] : std::vector<std::pair<std::string, std::string>>{{"1000", ""},
                                                                                       {"25", ""},
                                                                                       {"4611686018427387904", ""},
                                                                                       {"9223372036854775807", "24"},
                                                                                       {"9223372036854775800", "24"},
                                                                                       {"8", "24"}}) {
    INFO("offset " << offset << " length " << length);
    std::vector<std::pair<std::string, std::string>> entries = {{"offset", offset}};
    if (!length.empty()) entries.emplace_back("length", length);
    CHECK_THAT(error_of(external_model("w.bin", entries)), Catch::Contains("past the end"));
  }
  SECTION("a Constant's external value is read from the model's folder, at load") {
    auto constant_model = [](const std::string& location) {
      Builder m(13);
      m.input("x", pb::TensorProto::FLOAT, {int64_t{6}});
      auto& k = m.node("Constant", {}, {"w"}, "k");
      auto* a = k.add_attribute();
      a->set_name("value");
      a->set_type(pb::AttributeProto::TENSOR);
      auto* t = a->mutable_t();
      t->set_data_type(pb::TensorProto::FLOAT);
      t->add_dims(6);
      t->set_data_location(pb::TensorProto::EXTERNAL);
      auto* e = t->add_external_data();
      e->set_key("location");
      e->set_value(location);
      m.node("Add", {"x", "w"}, {"y"});
      m.output("y", pb::TensorProto::FLOAT, {int64_t{6}});
      return m.bytes();
    };
    // The working directory holds a w.bin of other values: it is not the one read.
    struct Chdir {
      std::filesystem::path back = std::filesystem::current_path();
      ~Chdir() { std::filesystem::current_path(back); }
    } restore;
    std::filesystem::current_path(root / "secret");
    {
      std::ofstream f(root / "secret/w.bin", std::ios::binary | std::ios::trunc);
      const std::vector<float> other = {100, 200, 300, 400, 500, 600};
      f.write(reinterpret_cast<const char*>(other.data()), 24);
    }
    auto model = sy::onnx::Model::load_bytes(constant_model("w.bin"), rt.cpu(), dir);
    CHECK(run_doubles(model, {{"x", x}}, "y") == std::vector<double>{1.5, 2.5, 3.5, 4.5, 5.5, 6.5});
    // Failures come at load, naming the node and the attribute.
    CHECK_THAT(error_of(constant_model("missing.bin")),
               Catch::Contains("node 'k'") && Catch::Contains("attribute 'value'") && Catch::Contains("no such file"));
    CHECK_THAT(error_of(constant_model("link.bin")), Catch::Contains("outside the model's folder"));
    CHECK_THAT(error_of(constant_model("../secret/w.bin")), Catch::Contains("bad external data location"));
  }
}

TEST_CASE("onnx: graphs that break ONNX's rules are refused at load naming what is wrong", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto base = [] {
    Builder m(13);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
    return m;
  };
  {
    auto m = base();  // two nodes write y
    m.node("Relu", {"x"}, {"y"}, "first");
    m.node("Neg", {"x"}, {"y"}, "second");
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
    CHECK_THAT(load_error(m.bytes(), rt.cpu()), Catch::Contains("node 'second'") && Catch::Contains("already defined"));
  }
  {
    auto m = base();  // Add with three inputs
    m.node("Add", {"x", "x", "x"}, {"y"}, "add3");
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
    CHECK_THAT(load_error(m.bytes(), rt.cpu()), Catch::Contains("node 'add3'") && Catch::Contains("3 inputs"));
  }
  {
    // A required input given as empty (PyTorch 1.13's export of LayerNorm
    // without affine): ONNX's checker and ONNX Runtime refuse it too.
    Builder m(17);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
    m.node("LayerNormalization", {"x", "", ""}, {"y"}, "ln");
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
    CHECK_THAT(load_error(m.bytes(), rt.cpu()),
               Catch::Contains("node 'ln'") && Catch::Contains("input 1 ('Scale') is required but given as empty"));
  }
  {
    auto m = base();  // an input listed twice
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
    CHECK_THAT(load_error(m.bytes(), rt.cpu()), Catch::Contains("input 'x' twice"));
  }
  {
    auto m = base();  // an output listed twice
    m.node("Relu", {"x"}, {"y"});
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
    CHECK_THAT(load_error(m.bytes(), rt.cpu()), Catch::Contains("output 'y' twice"));
  }
  {
    Builder m(13);  // no opset of the default domain at all
    m.model.clear_opset_import();
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
    CHECK_THAT(load_error(m.bytes(), rt.cpu()), Catch::Contains("imports none at all"));
  }
}

TEST_CASE("onnx: Split Range Flatten Resize and ConstantOfShape check their sizes at their own node", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto x = sy::TensorData::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto run_error = [&](const std::string& bytes, const sy::onnx::DataMap& in) {
    try {
      auto model = sy::onnx::Model::load_bytes(bytes, rt.cpu());
      auto f = model.infer(in);
      REQUIRE(f.wait_for(kWait));
      (void)f.get();
    } catch (const sy::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const auto& sizes : std::vector<std::vector<int64_t>>{{5, -2}, {1, 1}, {2, 2}, {3}}) {
    Builder m(13);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
    m.init_i64("s", sizes, {static_cast<int64_t>(sizes.size())});
    auto& n = m.node("Split", {"x", "s"}, {"a", "b"}, "split");
    attr_i(n, "axis", 1);
    m.output("a", pb::TensorProto::FLOAT, {});
    m.output("b", pb::TensorProto::FLOAT, {});
    CHECK_THAT(run_error(m.bytes(), {{"x", x}}), Catch::Contains("node 'split'") && Catch::Contains("summing to"));
  }
  {
    Builder m(13);
    m.init_i64("start", {-(int64_t{1} << 62)}, {});
    m.init_i64("limit", {int64_t{1} << 62}, {});
    m.init_i64("delta", {1}, {});
    m.node("Range", {"start", "limit", "delta"}, {"r"}, "range");
    m.output("r", pb::TensorProto::INT64, {});
    CHECK_THAT(run_error(m.bytes(), {}), Catch::Contains("node 'range'") && Catch::Contains("too large"));
  }
  for (int64_t axis : {int64_t{-3}, int64_t{3}, std::numeric_limits<int64_t>::min()}) {
    Builder m(13);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
    auto& n = m.node("Flatten", {"x"}, {"y"}, "flat");
    attr_i(n, "axis", axis);
    m.output("y", pb::TensorProto::FLOAT, {});
    CHECK_THAT(run_error(m.bytes(), {{"x", x}}), Catch::Contains("node 'flat'") && Catch::Contains("out of range"));
  }
  {
    Builder m(13);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{3}});
    m.init_i64("sizes", {1, 1, 2, int64_t{1} << 40}, {4});
    m.node("Resize", {"x", "", "", "sizes"}, {"y"}, "resize");
    m.output("y", pb::TensorProto::FLOAT, {});
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THAT(run_error(m.bytes(), {{"x", sy::TensorData::from(std::vector<float>(6, 1.0f), {1, 1, 2, 3})}}),
               Catch::Contains("node 'resize'") && Catch::Contains("too large"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // refused before any work
  }
  for (float scale : {std::nanf(""), -2.0f, 1e30f}) {
    Builder m(13);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{3}});
    m.init("scales", {1, 1, 1, scale}, {4});
    m.node("Resize", {"x", "", "scales"}, {"y"}, "resize");
    m.output("y", pb::TensorProto::FLOAT, {});
    INFO("scale " << scale);
    CHECK_THAT(run_error(m.bytes(), {{"x", sy::TensorData::from(std::vector<float>(6, 1.0f), {1, 1, 2, 3})}}),
               Catch::Contains("node 'resize'") && Catch::Contains("scale"));
  }
  {
    Builder m(13);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
    m.init_i64("axes", {0, 0}, {2});
    m.node("Unsqueeze", {"x", "axes"}, {"y"}, "unsq");
    m.output("y", pb::TensorProto::FLOAT, {});
    CHECK_THAT(run_error(m.bytes(), {{"x", x}}), Catch::Contains("node 'unsq'") && Catch::Contains("twice"));
  }
  {
    Builder m(13);
    m.init_i64("i", {0, 1}, {2});
    m.init_i64("depth", {-3}, {});
    m.init("values", {0, 1}, {2});
    m.node("OneHot", {"i", "depth", "values"}, {"y"}, "hot");
    m.output("y", pb::TensorProto::FLOAT, {});
    CHECK_THAT(run_error(m.bytes(), {}), Catch::Contains("node 'hot'") && Catch::Contains("depth"));
  }
  {
    Builder m(13);
    m.init_i64("shape", {-5, 3}, {2});
    m.node("ConstantOfShape", {"shape"}, {"c"}, "const");
    m.node("Relu", {"c"}, {"y"}, "relu");
    m.output("y", pb::TensorProto::FLOAT, {});
    CHECK_THAT(run_error(m.bytes(), {}), Catch::Contains("node 'const'") && Catch::Contains("negative extent"));
  }
}

TEST_CASE("onnx: a declared scalar input takes rank 0 only and bad host data names the input", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m(13);
  m.input("s", pb::TensorProto::FLOAT, {});  // a shape with no axes: a scalar
  m.node("Relu", {"s"}, {"y"});
  m.output("y", pb::TensorProto::FLOAT, {});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  REQUIRE(model.inputs().size() == 1);
  CHECK(model.inputs()[0].has_shape);
  CHECK(model.inputs()[0].dims.empty());
  CHECK(run_doubles(model, {{"s", sy::TensorData::from(std::vector<float>{-2}, {})}}, "y") == std::vector<double>{0});
  try {
    (void)model.infer({{"s", sy::TensorData::from(std::vector<float>{1, 2, 3, 4}, {2, 2})}});
    FAIL("a [2, 2] tensor was taken for a scalar input");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::shape_mismatch);
    CHECK_THAT(std::string(e.what()), Catch::Contains("'s'") && Catch::Contains("0 axes"));
  }
  try {
    auto hollow = sy::TensorData::from(std::vector<float>{1}, {});
    hollow.bytes = sy::Bytes();  // the fields are public: a caller can break the invariant
    (void)model.infer({{"s", hollow}});
    FAIL("a scalar without bytes was taken");
  } catch (const sy::Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("input 's'"));
  }
  // An input the model declares without a shape takes any rank.
  Builder free(13);
  auto* in = free.g().add_input();
  in->set_name("s");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::FLOAT);
  free.node("Relu", {"s"}, {"y"});
  free.output("y", pb::TensorProto::FLOAT, {});
  auto any = sy::onnx::Model::load_bytes(free.bytes(), rt.cpu());
  CHECK_FALSE(any.inputs()[0].has_shape);
  CHECK(run_doubles(any, {{"s", sy::TensorData::from(std::vector<float>{-1, 2}, {2})}}, "y") ==
        std::vector<double>{0, 2});
}

TEST_CASE("onnx: a tensor file whose element count overflows is refused", "[onnx]") {
  const auto path = std::filesystem::temp_directory_path() / ("sy_onnx_huge_" + std::to_string(::getpid()) + ".pb");
  pb::TensorProto t;
  t.set_name("huge");
  t.set_data_type(pb::TensorProto::FLOAT);
  t.add_dims(int64_t{1} << 40);
  t.add_dims(int64_t{1} << 40);
  {
    std::ofstream f(path, std::ios::binary);
    f << t.SerializeAsString();
  }
  try {
    (void)sy::onnx::read_tensor_proto(path.string());
    FAIL("a [2^40, 2^40] tensor without data was read");
  } catch (const sy::Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("'huge'") && Catch::Contains("too many elements"));
  }
  std::filesystem::remove(path);
}

TEST_CASE("onnx: MaxRoiPool matches Caffe's rule with rois past the image and empty bins", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  const int64_t n = 2, c = 3, h = 6, w = 7, ph = 3, pw = 2;
  const float scale = 0.5f;
  std::vector<float> x(static_cast<size_t>(n * c * h * w));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-5, 5);
  for (auto& v : x) v = dist(rng);
  // batch, x1, y1, x2, y2 (before spatial_scale); the second and third
  // reach past the image (empty bins there), the last is a single pixel.
  const std::vector<float> rois = {0, 0, 0, 12, 10, 1, 4, 2, 30, 20, 0, -9, -9, 3, 3, 1, 13, 11, 13, 11};
  const int64_t num = 4;
  Builder m(13);
  m.input("x", pb::TensorProto::FLOAT, {n, c, h, w});
  m.input("rois", pb::TensorProto::FLOAT, {num, int64_t{5}});
  auto& node = m.node("MaxRoiPool", {"x", "rois"}, {"y"}, "pool");
  attr_ints(node, "pooled_shape", {ph, pw});
  auto* a = node.add_attribute();
  a->set_name("spatial_scale");
  a->set_type(pb::AttributeProto::FLOAT);
  a->set_f(scale);
  m.output("y", pb::TensorProto::FLOAT, {num, c, ph, pw});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  const auto got = run_doubles(
      model, {{"x", sy::TensorData::from(x, {n, c, h, w})}, {"rois", sy::TensorData::from(rois, {num, 5})}}, "y");
  // The rule as plain loops (ONNX Runtime's kernel).
  std::vector<double> want;
  for (int64_t k = 0; k < num; ++k) {
    const float* r = &rois[static_cast<size_t>(k * 5)];
    const auto b = static_cast<int64_t>(r[0]);
    const auto sw = static_cast<int64_t>(std::round(r[1] * scale)), sh = static_cast<int64_t>(std::round(r[2] * scale));
    const auto ew = static_cast<int64_t>(std::round(r[3] * scale)), eh = static_cast<int64_t>(std::round(r[4] * scale));
    const int64_t rh = std::max<int64_t>(eh - sh + 1, 1), rw = std::max<int64_t>(ew - sw + 1, 1);
    const float bh = static_cast<float>(rh) / ph, bw = static_cast<float>(rw) / pw;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < ph; ++i)
        for (int64_t j = 0; j < pw; ++j) {
          auto clampi = [](int64_t v, int64_t hi) { return std::min(std::max<int64_t>(v, 0), hi); };
          const int64_t hs = clampi(static_cast<int64_t>(std::floor(i * bh)) + sh, h);
          const int64_t he = clampi(static_cast<int64_t>(std::ceil((i + 1) * bh)) + sh, h);
          const int64_t ws = clampi(static_cast<int64_t>(std::floor(j * bw)) + sw, w);
          const int64_t we = clampi(static_cast<int64_t>(std::ceil((j + 1) * bw)) + sw, w);
          double best = (he <= hs || we <= ws) ? 0.0 : -std::numeric_limits<double>::infinity();
          for (int64_t yy = hs; yy < he; ++yy)
            for (int64_t xx = ws; xx < we; ++xx)
              best = std::max<double>(best, x[static_cast<size_t>(((b * c + ch) * h + yy) * w + xx)]);
          want.push_back(best);
        }
  }
  CHECK(got == want);
  CHECK(std::count(want.begin(), want.end(), 0.0) > 0);  // the empty bins are in the case
}

TEST_CASE("onnx: shape arithmetic through Mod Floor and Transpose stays on the host and the plan is cached", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // x [2, 5]: s = Shape(x) = [2, 5];
  //   a = Mod(s, 3)                                   -> [2, 2]
  //   b = Cast(Floor(Cast(s, f32) * 0.5), i64)        -> [1, 2]
  //   c = Reshape(Transpose(Reshape(s, [2, 1])), [2]) -> [2, 5]
  //   y = ConstantOfShape(a + b + c)                  -> zeros [5, 9]
  Builder m(13);
  m.input("x", pb::TensorProto::FLOAT, {std::string("N"), std::string("T")});
  m.node("Shape", {"x"}, {"s"});
  m.init_i64("three", {3}, {1});
  m.node("Mod", {"s", "three"}, {"a"});
  auto& to_f = m.node("Cast", {"s"}, {"sf"});
  attr_i(to_f, "to", pb::TensorProto::FLOAT);
  m.init("half", {0.5f}, {1});
  m.node("Mul", {"sf", "half"}, {"sh"});
  m.node("Floor", {"sh"}, {"fl"});
  auto& to_i = m.node("Cast", {"fl"}, {"b"});
  attr_i(to_i, "to", pb::TensorProto::INT64);
  m.init_i64("col", {2, 1}, {2});
  m.init_i64("flat", {2}, {1});
  m.node("Reshape", {"s", "col"}, {"sc"});
  m.node("Transpose", {"sc"}, {"st"});
  m.node("Reshape", {"st", "flat"}, {"c"});
  m.node("Add", {"a", "b"}, {"ab"});
  m.node("Add", {"ab", "c"}, {"dims"});
  m.node("ConstantOfShape", {"dims"}, {"y"});
  m.output("y", pb::TensorProto::FLOAT, {});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  for (int round = 0; round < 2; ++round) {
    auto f = model.infer({{"x", sy::TensorData::from(std::vector<float>(10, 1.0f), {2, 5})}});
    REQUIRE(f.wait_for(kWait));
    CHECK(f.get().at("y").shape == sy::Shape{5, 9});
    // Every value the shape needs came from the host: the plan is kept.
    CHECK(model.cached_plans() == 1);
  }
}

namespace {

void attr_f(pb::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::FLOAT);
  a->set_f(v);
}

// A model of one optimizer node, importing only the training domain, as
// ONNX's own tests of these ops are.
Builder training_model(int64_t version = 1) {
  Builder m(13);
  m.model.clear_opset_import();
  auto* op = m.model.add_opset_import();
  op->set_domain("ai.onnx.preview.training");
  op->set_version(version);
  return m;
}

pb::NodeProto& training_node(Builder& m, const std::string& op, std::vector<std::string> in,
                             std::vector<std::string> out) {
  auto& n = m.node(op, std::move(in), std::move(out), "step");
  n.set_domain("ai.onnx.preview.training");
  return n;
}

std::vector<double> read_doubles(const sy::Tensor& t) {
  auto f = t.read();
  REQUIRE(f.wait_for(kWait));
  return f.get().to_vector<double>();
}

void check_near(const std::vector<double>& got, const std::vector<double>& want, double rtol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " against " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= rtol * std::abs(want[i]) + 1e-12);
  }
}

}  // namespace

TEST_CASE("onnx: Adam over two tensors follows its update rule with bias correction and decay", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  // Attributes are f32: the reference uses the values the node holds.
  const double alpha = 0.95f, beta = 0.85f, eps = 1e-2f, norm = 0.001f, post = 0.25f, r = 0.1;
  const int64_t t = GENERATE(0, 3);
  auto m = training_model();
  auto& n = training_node(m, "Adam", {"R", "T", "X1", "X2", "G1", "G2", "V1", "V2", "H1", "H2"},
                          {"X1n", "X2n", "V1n", "V2n", "H1n", "H2n"});
  attr_f(n, "alpha", 0.95f);
  attr_f(n, "beta", 0.85f);
  attr_f(n, "epsilon", 1e-2f);
  attr_f(n, "norm_coefficient", 0.001f);
  attr_f(n, "norm_coefficient_post", 0.25f);
  m.input("R", pb::TensorProto::DOUBLE, {});
  m.input("T", pb::TensorProto::INT64, {});
  for (const char* x : {"X1", "G1", "V1", "H1"}) m.input(x, pb::TensorProto::DOUBLE, {int64_t{1}});
  for (const char* x : {"X2", "G2", "V2", "H2"}) m.input(x, pb::TensorProto::DOUBLE, {int64_t{2}});
  for (const char* y : {"X1n", "V1n", "H1n"}) m.output(y, pb::TensorProto::DOUBLE, {int64_t{1}});
  for (const char* y : {"X2n", "V2n", "H2n"}) m.output(y, pb::TensorProto::DOUBLE, {int64_t{2}});
  const std::vector<std::vector<double>> x{{1.0}, {1.0, 2.0}}, g{{-1.0}, {-1.0, -3.0}}, v{{2.0}, {4.0, 1.0}},
      h{{0.5}, {1.0, 10.0}};
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev << ", T = " << t);
    auto d = rt.device(dev);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
    sy::onnx::TensorMap feeds{{"R", d.tensor<double>({r}, {})}, {"T", d.tensor<int64_t>({t}, {})}};
    for (size_t i = 0; i < 2; ++i) {
      const std::string k = std::to_string(i + 1);
      const sy::Shape s{static_cast<int64_t>(x[i].size())};
      feeds.emplace("X" + k, d.tensor<double>(x[i], s));
      feeds.emplace("G" + k, d.tensor<double>(g[i], s));
      feeds.emplace("V" + k, d.tensor<double>(v[i], s));
      feeds.emplace("H" + k, d.tensor<double>(h[i], s));
    }
    auto out = model.run(feeds);
    // ONNX's reference (apply_adam), written out in double.
    const double rate = t > 0 ? r * std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t)) : r;
    for (size_t i = 0; i < 2; ++i) {
      std::vector<double> xw, vw, hw;
      for (size_t j = 0; j < x[i].size(); ++j) {
        const double gr = norm * x[i][j] + g[i][j];
        vw.push_back(alpha * v[i][j] + (1 - alpha) * gr);
        hw.push_back(beta * h[i][j] + (1 - beta) * gr * gr);
        xw.push_back((1 - post) * (x[i][j] - rate * (vw.back() / (std::sqrt(hw.back()) + eps))));
      }
      const std::string k = std::to_string(i + 1);
      check_near(read_doubles(out.at("X" + k + "n")), xw, 1e-6);
      check_near(read_doubles(out.at("V" + k + "n")), vw, 1e-6);
      check_near(read_doubles(out.at("H" + k + "n")), hw, 1e-6);
    }
  }
}

TEST_CASE("onnx: Adagrad and Momentum follow their update rules in f32", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  const std::vector<float> x{1.0f, -2.0f, 0.5f}, g{0.25f, -1.0f, 3.0f}, s{0.5f, 1.5f, 0.0f};
  const int64_t t = 2;
  const float r = 0.1f;
  auto run = [&](Builder& m, const char* state) {
    m.input("R", pb::TensorProto::FLOAT, {});
    m.input("T", pb::TensorProto::INT64, {});
    for (const char* v : {"X", "G", state}) m.input(v, pb::TensorProto::FLOAT, {int64_t{3}});
    m.output("Xn", pb::TensorProto::FLOAT, {int64_t{3}});
    m.output("Sn", pb::TensorProto::FLOAT, {int64_t{3}});
    auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
    auto out = model.run({{"R", d.tensor<float>({r}, {})},
                          {"T", d.tensor<int64_t>({t}, {})},
                          {"X", d.tensor<float>(x, {3})},
                          {"G", d.tensor<float>(g, {3})},
                          {state, d.tensor<float>(s, {3})}});
    return std::pair{read_doubles(out.at("Xn")), read_doubles(out.at("Sn"))};
  };
  SECTION("Adagrad") {
    auto m = training_model();
    auto& n = training_node(m, "Adagrad", {"R", "T", "X", "G", "H"}, {"Xn", "Sn"});
    attr_f(n, "decay_factor", 0.1f);
    attr_f(n, "epsilon", 1e-5f);
    attr_f(n, "norm_coefficient", 0.001f);
    auto [xn, hn] = run(m, "H");
    std::vector<double> xw, hw;
    const double rate = r / (1 + t * 0.1);
    for (size_t j = 0; j < 3; ++j) {
      const double gr = 0.001 * x[j] + g[j];
      hw.push_back(s[j] + gr * gr);
      xw.push_back(x[j] - rate * gr / (std::sqrt(hw.back()) + 1e-5));
    }
    check_near(xn, xw, 1e-5);
    check_near(hn, hw, 1e-5);
  }
  for (const char* mode : {"standard", "nesterov"}) {
    SECTION(std::string("Momentum ") + mode) {
      auto m = training_model();
      auto& n = training_node(m, "Momentum", {"R", "T", "X", "G", "V"}, {"Xn", "Sn"});
      attr_f(n, "alpha", 0.9f);
      attr_f(n, "beta", 0.5f);
      attr_f(n, "norm_coefficient", 0.01f);
      attr_s(n, "mode", mode);
      auto [xn, vn] = run(m, "V");
      std::vector<double> xw, vw;
      for (size_t j = 0; j < 3; ++j) {
        const double gr = 0.01 * x[j] + g[j];
        vw.push_back(0.9 * s[j] + 0.5 * gr);  // T > 0: the gradient weighs beta
        xw.push_back(x[j] - r * (std::string(mode) == "nesterov" ? gr + 0.9 * vw.back() : vw.back()));
      }
      check_near(xn, xw, 1e-5);
      check_near(vn, vw, 1e-5);
    }
  }
}

TEST_CASE("onnx: malformed optimizer nodes are refused naming the node and what is wrong", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  auto momentum = [](const std::string& mode) {
    auto m = training_model();
    auto& n = training_node(m, "Momentum", {"R", "T", "X", "G", "V"}, {"Xn", "Vn"});
    attr_f(n, "alpha", 0.9f);
    attr_f(n, "beta", 0.5f);
    attr_f(n, "norm_coefficient", 0.0f);
    if (!mode.empty()) attr_s(n, "mode", mode);
    m.input("R", pb::TensorProto::FLOAT, {});
    m.input("T", pb::TensorProto::INT64, {});
    for (const char* v : {"X", "G", "V"}) m.input(v, pb::TensorProto::FLOAT, {std::string("N")});
    m.output("Xn", pb::TensorProto::FLOAT, {std::string("N")});
    m.output("Vn", pb::TensorProto::FLOAT, {std::string("N")});
    return m;
  };
  sy::Errc code{};
  SECTION("an unknown mode or a missing required attribute fails at load") {
    CHECK_THAT(load_error(momentum("heavy").bytes(), d, &code),
               Catch::Contains("node 'step'") && Catch::Contains("mode 'heavy'"));
    CHECK(code == sy::Errc::unsupported);
    CHECK_THAT(load_error(momentum("").bytes(), d, &code), Catch::Contains("alpha, beta, mode and norm_coefficient"));
  }
  SECTION("a gradient whose shape differs from its tensor fails at run naming the input") {
    auto model = sy::onnx::Model::load_bytes(momentum("standard").bytes(), d);
    try {
      (void)model.run({{"R", d.tensor<float>({0.1f}, {})},
                       {"T", d.tensor<int64_t>({1}, {})},
                       {"X", d.tensor<float>({1, 2, 3}, {3})},
                       {"G", d.tensor<float>({1, 2}, {2})},
                       {"V", d.tensor<float>({1, 2, 3}, {3})}});
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::invalid_argument);
      CHECK_THAT(e.what(),
                 Catch::Contains("node 'step'") && Catch::Contains("input 3 ('G')") && Catch::Contains("[2]"));
    }
    // An integer learning rate is refused as well (here by the declared type).
    try {
      (void)model.run({{"R", d.tensor<int64_t>({1}, {})},
                       {"T", d.tensor<int64_t>({1}, {})},
                       {"X", d.tensor<float>({1, 2, 3}, {3})},
                       {"G", d.tensor<float>({1, 2, 3}, {3})},
                       {"V", d.tensor<float>({1, 2, 3}, {3})}});
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("input 'R'"));
    }
  }
  SECTION("input lists of unequal length fail") {
    auto m = training_model();
    training_node(m, "Adagrad", {"R", "T", "X", "G"}, {"Xn"});
    m.input("R", pb::TensorProto::FLOAT, {});
    m.input("T", pb::TensorProto::INT64, {});
    m.input("X", pb::TensorProto::FLOAT, {int64_t{1}});
    m.input("G", pb::TensorProto::FLOAT, {int64_t{1}});
    m.output("Xn", pb::TensorProto::FLOAT, {int64_t{1}});
    auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
    try {
      (void)model.run({{"R", d.tensor<float>({0.1f}, {})},
                       {"T", d.tensor<int64_t>({1}, {})},
                       {"X", d.tensor<float>({1}, {1})},
                       {"G", d.tensor<float>({1}, {1})}});
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains("4 inputs") && Catch::Contains("lists of equal length"));
    }
  }
  SECTION("a default-domain node in a model that imports only the training domain, or version 2, fails at load") {
    auto m = training_model();
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}});
    m.node("Relu", {"x"}, {"y"}, "act");
    m.output("y", pb::TensorProto::FLOAT, {int64_t{1}});
    CHECK_THAT(load_error(m.bytes(), d, &code), Catch::Contains("node 'act'") && Catch::Contains("not imported"));
    CHECK(code == sy::Errc::invalid_argument);
    auto v2 = momentum("standard");
    v2.model.mutable_opset_import(0)->set_version(2);
    CHECK_THAT(load_error(v2.bytes(), d, &code), Catch::Contains("at version 2"));
    CHECK(code == sy::Errc::unsupported);
  }
}

TEST_CASE("onnx: RNN sequence_lens masks each entry's steps and bad lengths name the node", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  // X [3, 2, 1], hidden 1, W = R = 1: h_t = tanh(x_t + h_{t-1}).
  Builder m(14);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{3}, int64_t{2}, int64_t{1}});
  m.input("lens", pb::TensorProto::INT32, {std::string("L")});  // any count: the node checks it
  m.init("w", {1.0f}, {1, 1, 1});
  m.init("r", {1.0f}, {1, 1, 1});
  attr_i(m.node("RNN", {"x", "w", "r", "", "lens"}, {"y", "yh"}, "cell"), "hidden_size", 1);
  m.output("y", pb::TensorProto::FLOAT, {int64_t{3}, int64_t{1}, int64_t{2}, int64_t{1}});
  m.output("yh", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{2}, int64_t{1}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
  const std::vector<float> x{0.5f, 0.25f, -1.0f, 0.75f, 2.0f, -0.5f};  // [t][b]
  auto run = [&](std::vector<int32_t> lens) {
    return model.run(
        {{"x", d.tensor<float>(x, {3, 2, 1})}, {"lens", d.tensor<int32_t>(lens, {static_cast<int64_t>(lens.size())})}});
  };
  SECTION("an entry of length 0 keeps its initial state and a shorter one stops early") {
    auto out = run({0, 2});
    const float h0 = std::tanh(0.25f), h1 = std::tanh(0.75f + h0);
    const auto y = read_floats(out.at("y")), yh = read_floats(out.at("yh"));
    const std::vector<float> want_y{0.0f, h0, 0.0f, h1, 0.0f, 0.0f}, want_yh{0.0f, h1};
    REQUIRE(y.size() == want_y.size());
    for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(want_y[i]).margin(1e-6));
    REQUIRE(yh.size() == 2);
    CHECK(yh[0] == 0.0f);  // length 0: the initial state, untouched
    CHECK(yh[1] == Approx(want_yh[1]).margin(1e-6));
  }
  SECTION("lengths outside [0, seq] or of the wrong count fail the run naming the node") {
    for (const auto& [lens, what] :
         std::vector<std::pair<std::vector<int32_t>, std::string>>{{{4, 1}, "sequence_lens[0] is 4, outside [0, 3]"},
                                                                   {{1, -1}, "sequence_lens[1] is -1"},
                                                                   {{1}, "1 entries for a batch of 2"}}) {
      INFO(what);
      try {
        (void)run(lens);
        FAIL("no error");
      } catch (const sy::Error& e) {
        CHECK(e.code() == sy::Errc::invalid_argument);
        CHECK_THAT(e.what(), Catch::Contains("node 'cell'") && Catch::Contains(what));
      }
    }
  }
}

TEST_CASE("onnx: ConstantFill takes its shape from an input's values or shape or its attribute", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  auto ints_attr = [](pb::NodeProto& n, const std::string& name, std::vector<int64_t> v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  };
  SECTION("input_as_shape with extra_shape, as int64") {
    Builder m(7);
    m.init_i64("s", {2, 3}, {2});
    auto& n = m.node("ConstantFill", {"s"}, {"y"}, "fill");
    attr_i(n, "input_as_shape", 1);
    attr_i(n, "dtype", pb::TensorProto::INT64);
    attr_f(n, "value", 7.0f);
    ints_attr(n, "extra_shape", {4});
    m.output("y", pb::TensorProto::INT64, {int64_t{2}, int64_t{3}, int64_t{4}});
    auto out = sy::onnx::Model::load_bytes(m.bytes(), d).run(sy::onnx::TensorMap{});
    CHECK(out.at("y").shape() == sy::Shape{2, 3, 4});
    CHECK(out.at("y").dtype() == sy::DType::i64);
    CHECK(out.at("y").to_vector<int64_t>() == std::vector<int64_t>(24, 7));
  }
  SECTION("the input's shape, and the shape attribute without an input") {
    Builder m(7);
    m.input("x", pb::TensorProto::FLOAT, {std::string("N"), int64_t{2}});
    attr_f(m.node("ConstantFill", {"x"}, {"y"}, "like"), "value", 1.5f);
    ints_attr(m.node("ConstantFill", {}, {"z"}, "fixed"), "shape", {3});
    m.output("y", pb::TensorProto::FLOAT, {std::string("N"), int64_t{2}});
    m.output("z", pb::TensorProto::FLOAT, {int64_t{3}});
    auto out = sy::onnx::Model::load_bytes(m.bytes(), d).run({{"x", d.tensor<float>({1, 2, 3, 4, 5, 6}, {3, 2})}});
    CHECK(out.at("y").to_vector<float>() == std::vector<float>(6, 1.5f));
    CHECK(out.at("y").shape() == sy::Shape{3, 2});
    CHECK(out.at("z").to_vector<float>() == std::vector<float>(3, 0.0f));
  }
  SECTION("an input and a shape attribute together, or a dtype Switchyard lacks, are refused naming the node") {
    Builder m(7);
    m.init_i64("s", {2}, {1});
    auto& n = m.node("ConstantFill", {"s"}, {"y"}, "both");
    ints_attr(n, "shape", {2});
    m.output("y", pb::TensorProto::FLOAT, {int64_t{2}});
    try {
      (void)sy::onnx::Model::load_bytes(m.bytes(), d).run(sy::onnx::TensorMap{});
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("node 'both'") && Catch::Contains("both an input and the shape attribute"));
    }
    Builder u(7);
    auto& strings = u.node("ConstantFill", {}, {"y"}, "text");
    attr_i(strings, "dtype", pb::TensorProto::STRING);
    u.output("y", pb::TensorProto::FLOAT, {int64_t{1}});
    sy::Errc code{};
    CHECK_THAT(load_error(u.bytes(), d, &code), Catch::Contains("node 'text'") && Catch::Contains("dtype STRING"));
    CHECK(code == sy::Errc::unsupported);
  }
}

TEST_CASE("onnx: RNN with layout=1 reads initial_h as batch by direction and checks its shape", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  // Bidirectional, batch 2 (as many as directions, so a [directions, batch]
  // reading would run without an error), hidden 1, W = R = 1:
  // h_t = tanh(x_t + h_prev) in each direction.
  Builder m(14);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}, int64_t{1}});         // [batch, seq, in]
  m.input("h0", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}, std::string("H")});  // [batch, dirs, hidden]
  m.init("w", {1.0f, 1.0f}, {2, 1, 1});
  m.init("r", {1.0f, 1.0f}, {2, 1, 1});
  auto& n = m.node("RNN", {"x", "w", "r", "", "", "h0"}, {"y", "yh"}, "birnn");
  attr_i(n, "hidden_size", 1);
  attr_i(n, "layout", 1);
  attr_s(n, "direction", "bidirectional");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}, int64_t{2}, int64_t{1}});
  m.output("yh", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}, int64_t{1}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
  const std::vector<float> x{0.5f, -0.25f, 1.0f, 0.75f};  // x[b][t]
  const std::vector<float> h0{0.1f, 0.2f, 0.3f, 0.4f};    // h0[b][dir]
  auto out = model.run({{"x", d.tensor(x, {2, 2, 1})}, {"h0", d.tensor(h0, {2, 2, 1})}});
  std::vector<float> want_y(8), want_yh(4);
  for (int b = 0; b < 2; ++b) {
    const float f1 = std::tanh(x[b * 2] + h0[b * 2]), f2 = std::tanh(x[b * 2 + 1] + f1);
    const float r1 = std::tanh(x[b * 2 + 1] + h0[b * 2 + 1]), r0 = std::tanh(x[b * 2] + r1);
    // y[b][t][dir]
    want_y[b * 4 + 0] = f1;
    want_y[b * 4 + 1] = r0;
    want_y[b * 4 + 2] = f2;
    want_y[b * 4 + 3] = r1;
    want_yh[b * 2] = f2;
    want_yh[b * 2 + 1] = r0;
  }
  const auto y = read_floats(out.at("y")), yh = read_floats(out.at("yh"));
  REQUIRE(y.size() == 8);
  REQUIRE(yh.size() == 4);
  for (size_t i = 0; i < 8; ++i) CHECK(y[i] == Approx(want_y[i]).margin(1e-6));
  for (size_t i = 0; i < 4; ++i) CHECK(yh[i] == Approx(want_yh[i]).margin(1e-6));
  try {
    (void)model.run({{"x", d.tensor(x, {2, 2, 1})}, {"h0", d.tensor(std::vector<float>(8, 0.0f), {2, 2, 2})}});
    FAIL("no error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::shape_mismatch);
    CHECK_THAT(e.what(), Catch::Contains("node 'birnn'") && Catch::Contains("initial_h has shape [2, 2, 2]") &&
                             Catch::Contains("want [2, 2, 1]"));
  }
}

TEST_CASE("onnx: Einsum without an arrow sums a letter repeated within one operand", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  auto model_of = [](const std::string& equation, std::vector<std::variant<int64_t, std::string>> in_dims) {
    Builder m(12);
    m.input("x", pb::TensorProto::FLOAT, std::move(in_dims));
    attr_s(m.node("Einsum", {"x"}, {"y"}, "e"), "equation", equation);
    auto* y = m.g().add_output();
    y->set_name("y");
    y->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::FLOAT);
    return m.bytes();
  };
  std::vector<float> square(9), cube(18);
  for (size_t i = 0; i < square.size(); ++i) square[i] = static_cast<float>(i + 1);
  for (size_t i = 0; i < cube.size(); ++i) cube[i] = static_cast<float>(i);
  for (const auto& d : rt.devices()) {
    INFO(d.name());
    // 'ii' is the trace (numpy, torch.einsum and ONNX Runtime agree), not the diagonal.
    auto trace = sy::onnx::Model::load_bytes(model_of("ii", {int64_t{3}, int64_t{3}}), d);
    auto f = trace.infer({{"x", sy::TensorData::from(square, {3, 3})}});
    REQUIRE(f.wait_for(kWait));
    CHECK(f.get().at("y").shape == sy::Shape{});
    CHECK(f.get().at("y").to_vector<double>() == std::vector<double>{15});
    // 'iij' keeps j alone: sum over i of x[i][i][j].
    auto iij = sy::onnx::Model::load_bytes(model_of("iij", {int64_t{3}, int64_t{3}, int64_t{2}}), d);
    auto g = iij.infer({{"x", sy::TensorData::from(cube, {3, 3, 2})}});
    REQUIRE(g.wait_for(kWait));
    CHECK(g.get().at("y").shape == sy::Shape{2});
    CHECK(g.get().at("y").to_vector<double>() == std::vector<double>{0 + 8 + 16, 1 + 9 + 17});
    // The explicit form still keeps the diagonal.
    auto diag = sy::onnx::Model::load_bytes(model_of("ii->i", {int64_t{3}, int64_t{3}}), d);
    CHECK(run_doubles(diag, {{"x", sy::TensorData::from(square, {3, 3})}}, "y") == std::vector<double>{1, 5, 9});
  }
}

TEST_CASE("onnx: an initializer that is also a graph input is listed with a default and may be overridden", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // keep_initializers_as_inputs: the table w is a graph input with a stored [5, 3] value.
  Builder m;
  m.input("ids", pb::TensorProto::INT64, {std::string("n")});
  m.input("w", pb::TensorProto::FLOAT, {std::string("rows"), int64_t{3}});
  std::vector<float> stored(15, 0.0f);
  m.init("w", stored, {5, 3});
  m.node("Gather", {"w", "ids"}, {"y"}, "g");
  m.output("y", pb::TensorProto::FLOAT, {std::string("n"), int64_t{3}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  REQUIRE(model.inputs().size() == 2);
  CHECK(model.inputs()[0].name == "ids");
  CHECK_FALSE(model.inputs()[0].has_default);
  // The stored extent bounds nothing: a run may give a taller table.
  CHECK(model.inputs()[0].index_extent == -1);
  CHECK(model.inputs()[1].name == "w");
  CHECK(model.inputs()[1].has_default);

  std::vector<float> tall(27);
  for (size_t i = 0; i < tall.size(); ++i) tall[i] = static_cast<float>(i);
  auto ids = sy::TensorData::from(std::vector<int64_t>{7}, {1});
  CHECK(run_doubles(model, {{"ids", ids}, {"w", sy::TensorData::from(tall, {9, 3})}}, "y") ==
        std::vector<double>{21, 22, 23});
  // Left out, the stored table is used, and Gather's own check bounds the index.
  CHECK(run_doubles(model, {{"ids", sy::TensorData::from(std::vector<int64_t>{4}, {1})}}, "y") ==
        std::vector<double>{0, 0, 0});
  sy::Errc code{};
  CHECK_THAT(error_of(
                 [&] {
                   auto f = model.infer({{"ids", ids}});
                   REQUIRE(f.wait_for(kWait));
                   (void)f.get();
                 },
                 &code),
             Catch::Contains("node 'g' (Gather)"));
  CHECK(code == sy::Errc::index_out_of_range);
}

TEST_CASE("onnx: a default input declared with fixed extents may be given with others", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // w is declared [3] (and stored so) and is a graph input: a run may give
  // any extent, as ValueInfo::has_default says; only its rank is checked.
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  m.input("w", pb::TensorProto::FLOAT, {int64_t{3}});
  m.init("w", std::vector<float>{10, 20, 30}, {3});
  m.node("Add", {"w", "x"}, {"y"}, "a");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  REQUIRE(model.inputs().size() == 2);
  CHECK(model.inputs()[1].has_default);
  auto x = sy::TensorData::from(std::vector<float>(6, 1.0f), {2, 3});
  CHECK(run_doubles(model, {{"x", x}}, "y") == std::vector<double>{11, 21, 31, 11, 21, 31});
  CHECK(run_doubles(model, {{"x", x}, {"w", sy::TensorData::from(std::vector<float>{5}, {1})}}, "y") ==
        std::vector<double>{6, 6, 6, 6, 6, 6});
  // An extent the graph cannot take fails in the node, not at the input.
  sy::Errc code{};
  CHECK_THAT(error_of(
                 [&] {
                   (void)model.run({{"x", x}, {"w", sy::TensorData::from(std::vector<float>(4, 1), {4})}});
                 },
                 &code),
             Catch::Contains("node 'a' (Add)"));
  CHECK(code == sy::Errc::shape_mismatch);
  CHECK_THAT(error_of(
                 [&] {
                   (void)model.run({{"x", x}, {"w", sy::TensorData::from(std::vector<float>(3, 1), {1, 3})}});
                 },
                 &code),
             Catch::Contains("input 'w' must have 1 axes"));
  // A required input keeps its fixed extents.
  CHECK_THAT(error_of(
                 [&] {
                   (void)model.run({{"x", sy::TensorData::from(std::vector<float>(3, 1), {1, 3})}});
                 },
                 &code),
             Catch::Contains("input 'x' axis 0 must be 2"));
}

TEST_CASE("onnx: ONNX's type constraints are checked at load naming the node and the value", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  struct Case {
    const char* what;
    std::string bytes;
    std::vector<std::string> message;
  };
  std::vector<Case> cases;
  {
    Builder m;  // Add of i64 and f32: ONNX Runtime refuses it; it ran and returned f32 where outputs() said i64
    m.input("x", pb::TensorProto::INT64, {int64_t{2}});
    m.init("c", {0.5f, -1.7f}, {2});
    m.node("Add", {"x", "c"}, {"y"}, "add");
    m.output("y", pb::TensorProto::INT64, {int64_t{2}});
    cases.push_back({"mixed inputs", m.bytes(), {"node 'add' (Add)", "input 'c' is FLOAT", "'x' made type T INT64"}});
  }
  {
    Builder m;  // Relu of f32 declared to give i64
    m.input("x", pb::TensorProto::FLOAT, {int64_t{2}});
    m.node("Relu", {"x"}, {"y"}, "act");
    m.output("y", pb::TensorProto::INT64, {int64_t{2}});
    cases.push_back({"output of another type", m.bytes(), {"node 'act' (Relu)", "output 'y' is INT64"}});
  }
  {
    Builder m;  // Gather with float indices
    m.input("x", pb::TensorProto::FLOAT, {int64_t{3}});
    m.init("i", {1.0f}, {1});
    m.node("Gather", {"x", "i"}, {"y"}, "pick");
    m.output("y", pb::TensorProto::FLOAT, {int64_t{1}});
    cases.push_back(
        {"float indices", m.bytes(), {"node 'pick' (Gather)", "input 'i' is FLOAT", "Tind", "int32, int64"}});
  }
  {
    Builder m(13);  // Div takes no 8-bit integers before opset 14
    m.input("x", pb::TensorProto::INT8, {int64_t{2}});
    m.input("z", pb::TensorProto::INT8, {int64_t{2}});
    m.node("Div", {"x", "z"}, {"y"}, "div");
    m.output("y", pb::TensorProto::INT8, {int64_t{2}});
    cases.push_back({"a type the opset's op lacks", m.bytes(), {"node 'div' (Div)", "input 'x' is INT8"}});
  }
  for (const auto& c : cases) {
    INFO(c.what);
    sy::Errc code{};
    const std::string what = load_error(c.bytes, rt.cpu(), &code);
    for (const auto& part : c.message) CHECK_THAT(what, Catch::Contains(part));
    CHECK(code == sy::Errc::dtype_mismatch);
  }
  // Div of i8 is fine from opset 14 on.
  Builder ok(14);
  ok.input("x", pb::TensorProto::INT8, {int64_t{2}});
  ok.input("z", pb::TensorProto::INT8, {int64_t{2}});
  ok.node("Div", {"x", "z"}, {"y"}, "div");
  ok.output("y", pb::TensorProto::INT8, {int64_t{2}});
  auto model = sy::onnx::Model::load_bytes(ok.bytes(), rt.cpu());
  auto f = model.infer({{"x", sy::TensorData::from(std::vector<int8_t>{7, -7}, {2})},
                        {"z", sy::TensorData::from(std::vector<int8_t>{2, 2}, {2})}});
  REQUIRE(f.wait_for(kWait));
  CHECK(f.get().at("y").to_vector<int64_t>() == std::vector<int64_t>{3, -3});
}

TEST_CASE("onnx: ReduceLogSumExp gives +-inf where an infinite max shifts and -inf over an empty axis", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  const float inf = std::numeric_limits<float>::infinity();
  auto model_for = [](std::vector<std::variant<int64_t, std::string>> in_dims, int64_t out_rows) {
    Builder m;
    m.input("x", pb::TensorProto::FLOAT, std::move(in_dims));
    auto& n = m.node("ReduceLogSumExp", {"x"}, {"y"}, "lse");
    auto* axes = n.add_attribute();
    axes->set_name("axes");
    axes->set_type(pb::AttributeProto::INTS);
    axes->add_ints(1);
    attr_i(n, "keepdims", 0);
    m.output("y", pb::TensorProto::FLOAT, {out_rows});
    return m.bytes();
  };
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    // PyTorch's logsumexp: rows [-inf, 1], [inf, 1], [inf, -inf], [-inf, -inf], [1000, 1000].
    auto rows = sy::onnx::Model::load_bytes(model_for({int64_t{5}, int64_t{2}}, 5), rt.device(dev));
    const std::vector<float> x = {-inf, 1.0f, inf, 1.0f, inf, -inf, -inf, -inf, 1000.0f, 1000.0f};
    auto y = run_doubles(rows, {{"x", sy::TensorData::from(x, {5, 2})}}, "y");
    REQUIRE(y.size() == 5);
    CHECK(y[0] == Approx(1.0));
    CHECK(y[1] == inf);
    CHECK(y[2] == inf);
    CHECK(y[3] == -inf);
    CHECK(y[4] == Approx(1000.0 + std::log(2.0)));
    // log of an empty sum.
    auto empty = sy::onnx::Model::load_bytes(model_for({int64_t{2}, int64_t{0}}, 2), rt.device(dev));
    auto e = run_doubles(empty, {{"x", sy::TensorData::from(std::vector<float>{}, {2, 0})}}, "y");
    CHECK(e == std::vector<double>{-inf, -inf});
  }
}

TEST_CASE("onnx: ReduceMax and ReduceMin over an empty axis give the dtype's extremes", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  auto model_for = [](const char* op, pb::TensorProto::DataType type) {
    Builder m;
    m.input("x", type, {int64_t{2}, int64_t{0}});
    auto& n = m.node(op, {"x"}, {"y"}, "r");
    auto* axes = n.add_attribute();
    axes->set_name("axes");
    axes->set_type(pb::AttributeProto::INTS);
    axes->add_ints(1);
    m.output("y", type, {int64_t{2}, int64_t{1}});
    return m.bytes();
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    auto fmax = sy::onnx::Model::load_bytes(model_for("ReduceMax", pb::TensorProto::FLOAT), rt.device(dev));
    CHECK(run_doubles(fmax, {{"x", sy::TensorData::from(std::vector<float>{}, {2, 0})}}, "y") ==
          std::vector<double>{-inf, -inf});
    auto fmin = sy::onnx::Model::load_bytes(model_for("ReduceMin", pb::TensorProto::FLOAT), rt.device(dev));
    CHECK(run_doubles(fmin, {{"x", sy::TensorData::from(std::vector<float>{}, {2, 0})}}, "y") ==
          std::vector<double>{inf, inf});
    auto result = [&](const char* op, pb::TensorProto::DataType type, sy::TensorData x) {
      auto model = sy::onnx::Model::load_bytes(model_for(op, type), rt.device(dev));
      auto f = model.infer({{"x", std::move(x)}});
      REQUIRE(f.wait_for(kWait));
      return f.get().at("y");
    };
    const sy::TensorData none = sy::TensorData::from(std::vector<int64_t>{}, {2, 0});
    CHECK(result("ReduceMax", pb::TensorProto::INT64, none).to_vector<int64_t>() ==
          std::vector<int64_t>(2, std::numeric_limits<int64_t>::min()));
    CHECK(result("ReduceMin", pb::TensorProto::INT64, none).to_vector<int64_t>() ==
          std::vector<int64_t>(2, std::numeric_limits<int64_t>::max()));
    CHECK(result("ReduceMin", pb::TensorProto::UINT8, sy::TensorData::from(std::vector<uint8_t>{}, {2, 0}))
              .to_vector<uint8_t>() == std::vector<uint8_t>{255, 255});
  }
}

TEST_CASE("onnx: Sign keeps NaN as ONNX Runtime does", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{4}});
  m.node("Sign", {"x"}, {"y"}, "sign");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{4}});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    auto y = run_doubles(model, {{"x", sy::TensorData::from(std::vector<float>{nan, -2, 0, 3}, {4})}}, "y");
    REQUIRE(y.size() == 4);
    CHECK(std::isnan(y[0]));
    CHECK(std::vector<double>(y.begin() + 1, y.end()) == std::vector<double>{-1, 0, 1});
  }
}

TEST_CASE("onnx: Pad fills int64 with a constant past 2^53 exactly", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  const int64_t big = (int64_t{1} << 62) + 1;  // 2^62 + 1 is no double
  Builder m;
  m.input("x", pb::TensorProto::INT64, {int64_t{2}});
  m.init_i64("pads", {1, 2}, {2});
  m.init_i64("value", {big}, {});
  m.node("Pad", {"x", "pads", "value"}, {"y"}, "pad");
  m.output("y", pb::TensorProto::INT64, {int64_t{5}});
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    auto f = model.infer({{"x", sy::TensorData::from(std::vector<int64_t>{-7, 9}, {2})}});
    REQUIRE(f.wait_for(kWait));
    CHECK(f.get().at("y").to_vector<int64_t>() == std::vector<int64_t>{big, -7, 9, big, big});
  }
}

TEST_CASE("onnx: LSTM with input_forget and clip couples the gates and clips every activation's input", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  // One unit, one feature; gates i, o, f, c. Weights large enough that
  // clip=1.5 bounds each pre-activation; f's own weights are unused.
  const std::vector<float> w = {2, 1.5f, 9, 4}, r = {0.5f, -1, 9, 2}, b = {0.1f, 0, 9, -0.2f, 0, 0.3f, 9, 0};
  const float clip = 1.5f;
  Builder m;
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{1}, int64_t{1}});
  m.init("W", w, {1, 4, 1});
  m.init("R", r, {1, 4, 1});
  m.init("B", b, {1, 8});
  auto& n = m.node("LSTM", {"x", "W", "R", "B"}, {"y", "h"}, "lstm");
  attr_i(n, "hidden_size", 1);
  attr_i(n, "input_forget", 1);
  attr_f(n, "clip", clip);
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{1}, int64_t{1}, int64_t{1}});
  m.output("h", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}});
  const std::vector<double> xs = {3, -2};
  auto cl = [&](double v) { return std::clamp(v, -double{clip}, double{clip}); };
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  std::vector<double> want;
  double h = 0, c = 0;
  for (double x : xs) {
    const double i = sig(cl(w[0] * x + r[0] * h + b[0] + b[4]));
    const double cand = std::tanh(cl(w[3] * x + r[3] * h + b[3] + b[7]));
    c = (1 - i) * c + i * cand;
    const double o = sig(cl(w[1] * x + r[1] * h + b[1] + b[5]));
    h = o * std::tanh(cl(c));
    want.push_back(h);
  }
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    auto y = run_doubles(model, {{"x", sy::TensorData::from(std::vector<float>{3, -2}, {2, 1, 1})}}, "y");
    REQUIRE(y.size() == 2);
    CHECK(y[0] == Approx(want[0]).epsilon(1e-5));
    CHECK(y[1] == Approx(want[1]).epsilon(1e-5));
  }
}

TEST_CASE("onnx: RNN activations with alpha and beta consume the lists in order, as ONNX Runtime", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  // One unit, one feature, three steps; direction 0: W 0.8, R 0.5, biases
  // 0.1 and -0.2; direction 1: W -1.1, R 0.7, biases 0.05 and 0.3.
  auto build = [](const std::vector<std::string>& acts, const std::vector<float>& alphas,
                  const std::vector<float>& betas, bool bidirectional) {
    const int64_t d = bidirectional ? 2 : 1;
    std::vector<float> w = {0.8f, -1.1f}, r = {0.5f, 0.7f}, b = {0.1f, -0.2f, 0.05f, 0.3f};
    w.resize(static_cast<size_t>(d));
    r.resize(static_cast<size_t>(d));
    b.resize(static_cast<size_t>(2 * d));
    Builder m(14);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{3}, int64_t{1}, int64_t{1}});
    m.init("W", w, {d, 1, 1});
    m.init("R", r, {d, 1, 1});
    m.init("B", b, {d, 2});
    auto& n = m.node("RNN", {"x", "W", "R", "B"}, {"y"}, "rnn");
    attr_i(n, "hidden_size", 1);
    if (bidirectional) attr_s(n, "direction", "bidirectional");
    auto* a = n.add_attribute();
    a->set_name("activations");
    a->set_type(pb::AttributeProto::STRINGS);
    for (const auto& s : acts) a->add_strings(s);
    auto floats = [&](const char* name, const std::vector<float>& v) {
      if (v.empty()) return;
      auto* f = n.add_attribute();
      f->set_name(name);
      f->set_type(pb::AttributeProto::FLOATS);
      for (float x : v) f->add_floats(x);
    };
    floats("activation_alpha", alphas);
    floats("activation_beta", betas);
    m.output("y", pb::TensorProto::FLOAT, {int64_t{3}, d, int64_t{1}, int64_t{1}});
    return m.bytes();
  };
  struct Case {
    std::vector<std::string> acts;
    std::vector<float> alphas, betas;
    bool bidirectional;
    std::vector<double> want;  // Y [3, directions, 1, 1], ONNX Runtime 1.30's
  };
  const std::vector<Case> cases = {
      // LeakyRelu takes alpha 0.3; HardSigmoid the next alpha and the first beta.
      {{"LeakyRelu", "HardSigmoid"}, {0.3f, 0.25f}, {0.6f}, true, {1.1, 0.45, -0.345, 1.0, 0.2875, 0.495}},
      {{"ThresholdedRelu"}, {0.9f}, {}, false, {1.1, 0, 0}},
      // Elu takes alpha 0.4, ScaledTanh alpha 0.8 and beta 1.2.
      {{"elu", "SCALEDTANH"},
       {0.4f, 0.8f},
       {1.2f},
       true,
       {1.1, -0.5704943, -0.2733453, 0.7934532, 0.3233274, -0.3722056}},
      {{"Affine"}, {0.5f}, {0.1f}, false, {0.65, -0.5875, 0.183125}},
      // No values: ThresholdedRelu's own default, alpha 1 (ONNX Runtime
      // takes 0 and gives 1.1, 0, 0.46).
      {{"ThresholdedRelu"}, {}, {}, false, {1.1, 0, 0}},
  };
  for (const auto& c : cases) {
    for (const char* dev : {"cpu:0", "reference:0"}) {
      INFO(c.acts.front() << " on " << dev);
      auto m = sy::onnx::Model::load_bytes(build(c.acts, c.alphas, c.betas, c.bidirectional), rt.device(dev));
      auto y = run_doubles(m, {{"x", sy::TensorData::from(std::vector<float>{1.5f, -2.0f, 0.7f}, {3, 1, 1})}}, "y");
      REQUIRE(y.size() == c.want.size());
      for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(c.want[i]).margin(1e-6));
    }
  }
  // A name outside ONNX's list still fails at load, naming it.
  try {
    (void)sy::onnx::Model::load_bytes(build({"Swish"}, {}, {}, false), rt.cpu());
    FAIL("loaded");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::unsupported);
    CHECK_THAT(e.what(), Catch::Contains("activation Swish"));
  }
}

TEST_CASE("onnx: Softmax and LogSoftmax before opset 13 take an empty batch", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    Builder m(11);
    m.input("x", pb::TensorProto::FLOAT, {std::string("N"), int64_t{3}, int64_t{4}});
    m.node(op, {"x"}, {"y"}, "sm");
    m.output("y", pb::TensorProto::FLOAT, {std::string("N"), int64_t{3}, int64_t{4}});
    for (const char* dev : {"cpu:0", "reference:0"}) {
      INFO(op << " on " << dev);
      auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
      auto f = model.infer({{"x", sy::TensorData::from(std::vector<float>{}, {0, 3, 4})}});
      REQUIRE(f.wait_for(kWait));
      CHECK(f.get().at("y").shape == sy::Shape{0, 3, 4});
      // And a non-empty one still normalises over the flattened [3, 4].
      std::vector<float> x(24, 0.0f);
      auto g = model.infer({{"x", sy::TensorData::from(x, {2, 3, 4})}});
      REQUIRE(g.wait_for(kWait));
      const auto y = g.get().at("y").to_vector<float>();
      REQUIRE(y.size() == 24);
      if (std::string(op) == "Softmax") CHECK(y[5] == Approx(1.0 / 12));
    }
  }
}

TEST_CASE("onnx: Upsample and Resize scales give floor(extent * scale) in f32 as the model declares", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // PyTorch 1.13 exports interpolate(size=(8, 11)) of a 5 x 7 image at
  // opset 9 as scales 8/5 and 11/7 in f32: 7 * 1.5714285f is 11 in f32,
  // 10.99999976 in double.
  const float s = 11.0f / 7.0f;
  for (int64_t opset : {9, 13}) {
    INFO("opset " << opset);
    Builder m(opset);
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{5}, int64_t{7}});
    if (opset == 9) {
      m.init("scales", {1.0f, 1.0f, 1.6f, s}, {4});
      auto& n = m.node("Upsample", {"x", "scales"}, {"y"}, "up");
      attr_s(n, "mode", "nearest");
    } else {
      m.init("roi", {}, {0});
      m.init("scales", {1.0f, 1.0f, 1.6f, s}, {4});
      auto& n = m.node("Resize", {"x", "roi", "scales"}, {"y"}, "up");
      attr_s(n, "mode", "nearest");
    }
    m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{8}, int64_t{11}});
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
    std::vector<float> x(35);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    auto f = model.infer({{"x", sy::TensorData::from(x, {1, 1, 5, 7})}});
    REQUIRE(f.wait_for(kWait));
    CHECK(f.get().at("y").shape == sy::Shape{1, 1, 8, 11});
  }
}

TEST_CASE("onnx: a reflect pad too wide for the cropped extent names the crop", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m(13);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{3}});
  m.init_i64("pads", {2, -1}, {2});
  auto& n = m.node("Pad", {"x", "pads"}, {"y"}, "pad");
  attr_s(n, "mode", "reflect");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{4}});
  // The plan for the input's shape is made at the call, which throws.
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  const std::string message = error_of([&] {
    (void)model.infer({{"x", sy::TensorData::from(std::vector<float>{1, 2, 3}, {3})}});
  });
  CHECK_THAT(message, Catch::Contains("reflect padding of 2 on axis 0 of extent 2") &&
                          Catch::Contains("after its negative pad's crop"));
}

TEST_CASE("onnx: random ops draw new values on every run from the device's stream", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  auto attr_f = [](pb::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::FLOAT);
    a->set_f(v);
  };
  Builder m(15);
  m.input("p", pb::TensorProto::FLOAT, {int64_t{64}});
  auto& u = m.node("RandomUniform", {}, {"u"}, "uniform");
  attr_f(u, "low", 2.0f);
  attr_f(u, "high", 3.0f);
  auto* shape = u.add_attribute();
  shape->set_name("shape");
  shape->set_type(pb::AttributeProto::INTS);
  shape->add_ints(4);
  shape->add_ints(16);
  attr_i(u, "dtype", pb::TensorProto::DOUBLE);
  auto& nl = m.node("RandomNormalLike", {"p"}, {"n"}, "normal");
  attr_f(nl, "mean", 10.0f);
  attr_f(nl, "scale", 0.5f);
  auto& b = m.node("Bernoulli", {"p"}, {"b"}, "coin");
  attr_i(b, "dtype", pb::TensorProto::INT64);
  m.output("u", pb::TensorProto::DOUBLE, {int64_t{4}, int64_t{16}});
  m.output("n", pb::TensorProto::FLOAT, {int64_t{64}});
  m.output("b", pb::TensorProto::INT64, {int64_t{64}});
  std::vector<float> p(64);
  for (size_t i = 0; i < p.size(); ++i) p[i] = i < 16 ? 0.0f : i < 32 ? 1.0f : 0.5f;
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    std::vector<double> first_u;
    for (int run = 0; run < 2; ++run) {
      auto f = model.infer({{"p", sy::TensorData::from(p, {64})}});
      REQUIRE(f.wait_for(kWait));
      auto out = f.get();
      CHECK(out.at("u").dtype == sy::DType::f64);
      CHECK(out.at("u").shape == sy::Shape{4, 16});
      const auto uv = out.at("u").to_vector<double>();
      for (double v : uv) CHECK((v >= 2.0 && v < 3.0));
      const auto nv = out.at("n").to_vector<double>();
      double mean = 0;
      for (double v : nv) mean += v / 64;
      CHECK(mean == Approx(10.0).margin(0.5));  // 64 draws of N(10, 0.5): 8 standard errors
      const auto bv = out.at("b").to_vector<int64_t>();
      int64_t heads = 0;
      for (size_t i = 0; i < bv.size(); ++i) {
        CHECK((bv[i] == 0 || bv[i] == 1));
        if (i < 16) CHECK(bv[i] == 0);
        if (i >= 16 && i < 32) CHECK(bv[i] == 1);
        if (i >= 32) heads += bv[i];
      }
      CHECK((heads > 0 && heads < 32));
      // A plan is cached for the signature, but random nodes are not folded
      // into it: the second run draws again.
      if (run == 0)
        first_u = uv;
      else
        CHECK(uv != first_u);
    }
  }
}

TEST_CASE("onnx: Dropout in training mode keeps x / (1 - ratio) where its mask says and refuses ratio 1", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m(13);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{200}});
  m.input("ratio", pb::TensorProto::FLOAT, {});
  m.input("training", pb::TensorProto::BOOL, {});
  m.node("Dropout", {"x", "ratio", "training"}, {"y", "mask"}, "drop");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{200}});
  m.output("mask", pb::TensorProto::BOOL, {int64_t{200}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  std::vector<float> x(200);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) + 1.0f;
  auto run = [&](float ratio) {
    return model.infer({{"x", sy::TensorData::from(x, {200})},
                        {"ratio", sy::TensorData::from(std::vector<float>{ratio}, {})},
                        {"training", flag(true)}});
  };
  auto f = run(0.75f);
  REQUIRE(f.wait_for(kWait));
  auto out = f.get();
  const auto y = out.at("y").to_vector<float>();
  const auto mask = out.at("mask").to_vector<int64_t>();
  int kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (mask[i] != 0) {
      ++kept;
      CHECK(y[i] == Approx(x[i] * 4.0f));
    } else {
      CHECK(y[i] == 0.0f);
    }
  }
  CHECK((kept > 20 && kept < 80));  // 200 draws at 1/4: mean 50, sd ~6
  const std::string message = error_of([&] { (void)run(1.0f).get(); });
  CHECK_THAT(message, Catch::Contains("drop") && Catch::Contains("[0, 1)"));
}

TEST_CASE("onnx: a random op asked for an integer dtype is refused at load", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m(13);
  auto& u = m.node("RandomNormal", {}, {"y"}, "noise");
  attr_i(u, "dtype", pb::TensorProto::INT32);
  auto* shape = u.add_attribute();
  shape->set_name("shape");
  shape->set_type(pb::AttributeProto::INTS);
  shape->add_ints(3);
  m.output("y", pb::TensorProto::INT32, {int64_t{3}});
  CHECK_THAT(load_error(m.bytes(), rt.cpu()), Catch::Contains("noise") && Catch::Contains("floating-point"));
}

TEST_CASE("onnx: Multinomial draws classes by softmax probability and GlobalLpPool takes the plane's p-norm",
          "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  const float ninf = -std::numeric_limits<float>::infinity();
  Builder m(13);
  m.input("logits", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
  auto& mn = m.node("Multinomial", {"logits"}, {"k"}, "draw");
  attr_i(mn, "sample_size", 2000);
  attr_i(mn, "dtype", pb::TensorProto::INT64);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{2}, int64_t{2}, int64_t{2}});
  m.node("GlobalLpPool", {"x"}, {"l2"}, "l2pool");
  auto& l3 = m.node("GlobalLpPool", {"x"}, {"l3"}, "l3pool");
  attr_i(l3, "p", 3);
  m.output("k", pb::TensorProto::INT64, {int64_t{2}, int64_t{2000}});
  m.output("l2", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{2}, int64_t{1}, int64_t{1}});
  m.output("l3", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{2}, int64_t{1}, int64_t{1}});
  // Row 0: classes 0 and 2 at 1/4 and 3/4, class 1 never; row 1: class 1 only.
  const std::vector<float> logits = {0.0f, ninf, std::log(3.0f), ninf, 5.0f, ninf};
  const std::vector<float> x = {3, -4, 0, 0, 1, 1, 1, -1};
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    auto f =
        model.infer({{"logits", sy::TensorData::from(logits, {2, 3})}, {"x", sy::TensorData::from(x, {1, 2, 2, 2})}});
    REQUIRE(f.wait_for(kWait));
    auto out = f.get();
    const auto k = out.at("k").to_vector<int64_t>();
    REQUIRE(k.size() == 4000);
    int64_t zeros = 0;
    for (size_t i = 0; i < 2000; ++i) {
      CHECK((k[i] == 0 || k[i] == 2));
      zeros += k[i] == 0 ? 1 : 0;
      CHECK(k[2000 + i] == 1);
    }
    CHECK((zeros > 400 && zeros < 600));  // 2000 draws at 1/4: mean 500, sd ~19
    CHECK_THAT(out.at("l2").to_vector<double>(),
               Catch::Approx(std::vector<double>{5.0, 2.0}).epsilon(1e-6));  // sqrt(9 + 16), sqrt(4)
    CHECK_THAT(out.at("l3").to_vector<double>(),
               Catch::Approx(std::vector<double>{std::cbrt(91.0), std::cbrt(4.0)}).epsilon(1e-6));
  }
}

TEST_CASE("onnx: impossible random attributes are refused at load and Hardmax takes empty rows", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  auto uniform = [](std::vector<int64_t> dims, float low, float high) {
    Builder m(13);
    auto& u = m.node("RandomUniform", {}, {"y"}, "ru");
    auto* shape = u.add_attribute();
    shape->set_name("shape");
    shape->set_type(pb::AttributeProto::INTS);
    for (auto d : dims) shape->add_ints(d);
    for (auto [name, v] : {std::pair{"low", low}, std::pair{"high", high}}) {
      auto* a = u.add_attribute();
      a->set_name(name);
      a->set_type(pb::AttributeProto::FLOAT);
      a->set_f(v);
    }
    m.output("y", pb::TensorProto::FLOAT, {});
    return m.bytes();
  };
  CHECK_THAT(load_error(uniform({-1, 5}, 0, 1), rt.cpu()), Catch::Contains("'ru'") && Catch::Contains("negative"));
  CHECK_THAT(load_error(uniform({2}, 2, 1), rt.cpu()), Catch::Contains("'ru'") && Catch::Contains("above high"));
  CHECK(load_error(uniform({2}, 1, 1), rt.cpu()).empty());
  // Hardmax over an empty axis (opset 11 flattens to [2, 0]): an empty result, as Softmax.
  Builder m(11);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{0}, int64_t{3}});
  m.node("Hardmax", {"x"}, {"y"}, "hm");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{0}, int64_t{3}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto f = model.infer({{"x", sy::TensorData::from(std::vector<float>{}, {2, 0, 3})}});
  REQUIRE(f.wait_for(kWait));
  CHECK(f.get().at("y").shape == sy::Shape{2, 0, 3});
}

TEST_CASE("onnx: an unnamed node's run-time error names it by position as the load-time ones do", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  Builder m(13);
  m.input("logits", pb::TensorProto::FLOAT, {int64_t{2}, std::string("classes")});
  m.node("Identity", {"logits"}, {"same"});
  m.node("Multinomial", {"same"}, {"k"});
  m.output("k", pb::TensorProto::INT32, {int64_t{2}, int64_t{1}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  const std::string message = error_of([&] {
    (void)model.infer({{"logits", sy::TensorData::from(std::vector<float>{}, {2, 0})}}).get();
  });
  CHECK_THAT(message, Catch::Contains("node '#1' (Multinomial)") && Catch::Contains("no classes"));
  // Inside a branch too (its nodes keep their own names): the second node
  // of then_branch, Multinomial of the rank-1 outer x.
  Body then_b("then"), else_b("else");
  then_b.node("Identity", {"x"}, {"x1"});
  then_b.node("Multinomial", {"x1"}, {"t"});
  then_b.output("t", pb::TensorProto::INT32, {int64_t{2}});
  else_b.node("Identity", {"x"}, {"e"});
  else_b.output("e", pb::TensorProto::FLOAT, {int64_t{2}});
  auto branchy = sy::onnx::Model::load_bytes(if_model(then_b, else_b), rt.cpu());
  const std::string inside = error_of([&] {
    (void)branchy.infer({{"c", flag(true)}, {"x", sy::TensorData::from(std::vector<float>{1, 2}, {2})}}).get();
  });
  CHECK_THAT(inside, Catch::Contains("node '#1' (Multinomial)") && Catch::Contains("[batch_size, class_size]"));
}

TEST_CASE("onnx: linear Resize of u8 truncates once after both axes as ONNX Runtime", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  Builder m(13);
  m.input("x", pb::TensorProto::UINT8, {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{2}});
  m.init("scales", {1, 1, 2, 2}, {4});
  auto& n = m.node("Resize", {"x", "", "scales"}, {"y"}, "rz");
  attr_s(n, "mode", "linear");
  attr_s(n, "coordinate_transformation_mode", "asymmetric");
  m.output("y", pb::TensorProto::UINT8, {int64_t{1}, int64_t{1}, int64_t{4}, int64_t{4}});
  const std::vector<uint8_t> x = {1, 2, 2, 3};
  // Bilinear in doubles, truncated once: (1, 1) reads all four at 0.5 and is
  // 2 (a truncation after the first axis made it 1).
  std::vector<uint8_t> want;
  for (int oy = 0; oy < 4; ++oy)
    for (int ox = 0; ox < 4; ++ox) {
      const double sy_ = oy / 2.0, sx = ox / 2.0, fy = std::floor(sy_), fx = std::floor(sx);
      double v = 0;
      for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx) {
          const int iy = std::min(1, static_cast<int>(fy) + dy), ix = std::min(1, static_cast<int>(fx) + dx);
          v += (dy ? sy_ - fy : 1 - (sy_ - fy)) * (dx ? sx - fx : 1 - (sx - fx)) * x[static_cast<size_t>(iy * 2 + ix)];
        }
      want.push_back(static_cast<uint8_t>(v));
    }
  REQUIRE(want[5] == 2);
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    auto f = model.infer({{"x", sy::TensorData::from(x, {1, 1, 2, 2})}});
    REQUIRE(f.wait_for(kWait));
    CHECK(f.get().at("y").to_vector<uint8_t>() == want);
  }
}

TEST_CASE("onnx: nearest Resize maps output to input coordinates in f32 as PyTorch and ONNX Runtime", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  // interpolate(scale_factor=0.6, mode='nearest') as PyTorch exports it:
  // output 3 reads input 3 / 0.6f, 5 in f32 (4.9999998 in double: 4).
  Builder m(13);
  m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{7}});
  m.init("roi", {}, {0});
  m.init("scales", {1.0f, 1.0f, 1.0f, 0.6f}, {4});
  auto& n = m.node("Resize", {"x", "roi", "scales"}, {"y"}, "down");
  attr_s(n, "mode", "nearest");
  attr_s(n, "coordinate_transformation_mode", "asymmetric");
  attr_s(n, "nearest_mode", "floor");
  m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{4}});
  for (const char* dev : {"cpu:0", "reference:0"}) {
    INFO(dev);
    auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.device(dev));
    auto y =
        run_doubles(model, {{"x", sy::TensorData::from(std::vector<float>{0, 1, 2, 3, 4, 5, 6}, {1, 1, 1, 7})}}, "y");
    CHECK(y == std::vector<double>{0, 1, 3, 5});
  }
}

TEST_CASE("onnx: the hyperbolic ops keep f32's range and precision at their extremes", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  // exp(x) - exp(-x) and log(x + sqrt(x^2 + 1)) overflowed (sinh(89),
  // asinh(1e20): inf) or cancelled (sinh(1e-7), asinh(1e-7): 1.19e-7).
  struct Case {
    const char* op;
    std::vector<float> in;
    double (*want)(double);
  };
  const std::vector<Case> cases{
      {"Sinh", {89.0f, 1e-7f, -1e-6f, 0.5f, -3.0f, 0.0f, -89.0f, 100.0f}, [](double v) { return std::sinh(v); }},
      {"Cosh", {89.0f, 1e-7f, -1e-6f, 0.5f, -3.0f, 0.0f, -89.0f, 100.0f}, [](double v) { return std::cosh(v); }},
      {"Asinh", {-1e4f, 1e20f, 1e-7f, -1e-6f, -1e5f, 0.5f, -3.0f, 3e38f}, [](double v) { return std::asinh(v); }},
      {"Acosh", {1e20f, 1.0f, 1.0000001f, 1.5f, 3.0f, 3e38f, 0.5f, 1e4f}, [](double v) { return std::acosh(v); }},
  };
  for (const auto& c : cases) {
    Builder m;
    m.input("x", pb::TensorProto::FLOAT, {int64_t{8}});
    m.node(c.op, {"x"}, {"y"}, "h");
    m.output("y", pb::TensorProto::FLOAT, {int64_t{8}});
    for (const auto& d : rt.devices()) {
      INFO(c.op << " on " << d.name());
      auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
      auto got = run_doubles(model, {{"x", sy::TensorData::from(c.in, {8})}}, "y");
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("x = " << c.in[i]);
        const auto want = static_cast<float>(c.want(c.in[i]));  // f64, rounded once to f32
        if (std::isnan(want))
          CHECK(std::isnan(got[i]));
        else if (std::isinf(want))
          CHECK(got[i] == want);
        else
          CHECK(got[i] == Approx(want).epsilon(1e-6).margin(0));
      }
    }
  }
}

TEST_CASE(
    "onnx: a zero vector normalised and Gemm with beta 0 and integer Einsum sums and Slice back from before the start",
    "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  for (const auto& d : rt.devices()) {
    INFO(d.name());
    {  // A zero row stays zero (ONNX Runtime, F.normalize), not 0 / 0.
      Builder m;
      m.input("x", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
      attr_i(m.node("LpNormalization", {"x"}, {"y"}, "n"), "p", 2);
      m.output("y", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{3}});
      auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
      CHECK(run_doubles(model, {{"x", sy::TensorData::from(std::vector<float>{0, 0, 0, 3, 4, 0}, {2, 3})}}, "y") ==
            std::vector<double>{0, 0, 0, 0.6000000238418579, 0.800000011920929, 0});
    }
    {  // beta = 0 leaves C out, its NaN too.
      Builder m;
      m.input("a", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{2}});
      m.input("b", pb::TensorProto::FLOAT, {int64_t{2}, int64_t{2}});
      m.init("c", {std::numeric_limits<float>::quiet_NaN()}, {1});
      attr_f(m.node("Gemm", {"a", "b", "c"}, {"y"}, "g"), "beta", 0.0f);
      m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{2}});
      auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
      CHECK(run_doubles(model,
                        {{"a", sy::TensorData::from(std::vector<float>{1, 2}, {1, 2})},
                         {"b", sy::TensorData::from(std::vector<float>{1, 2, 3, 4}, {2, 2})}},
                        "y") == std::vector<double>{7, 10});
    }
    {  // ij->j on i32 is i32 (the output has the inputs' type), not i64.
      Builder m(12);
      m.input("x", pb::TensorProto::INT32, {int64_t{2}, int64_t{2}});
      attr_s(m.node("Einsum", {"x"}, {"y"}, "e"), "equation", "ij->j");
      m.output("y", pb::TensorProto::INT32, {int64_t{2}});
      auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
      auto f = model.infer({{"x", sy::TensorData::from(std::vector<int32_t>{1, 2, 3, 4}, {2, 2})}});
      REQUIRE(f.wait_for(kWait));
      const auto y = f.get().at("y");
      CHECK(y.dtype == sy::DType::i32);
      CHECK(y.to_vector<double>() == std::vector<double>{4, 6});
    }
    {  // Step -1 from -5 on 3 elements: ONNX clamps the start to 0, so [x0].
      Builder m;
      m.input("x", pb::TensorProto::FLOAT, {int64_t{3}});
      m.init_i64("s", {-5}, {1});
      m.init_i64("e", {-10}, {1});
      m.init_i64("a", {0}, {1});
      m.init_i64("p", {-1}, {1});
      m.node("Slice", {"x", "s", "e", "a", "p"}, {"y"}, "sl");
      m.output("y", pb::TensorProto::FLOAT, {std::string("n")});
      auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
      CHECK(run_doubles(model, {{"x", sy::TensorData::from(std::vector<float>{1, 2, 3}, {3})}}, "y") ==
            std::vector<double>{1});
    }
  }
}

TEST_CASE("onnx: ceil_mode drops a last window that starts in wide end padding", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  // Length 8, kernel 3, stride 2, pads (0, 2): ceil((8 + 2 - 3) / 2) + 1 = 5
  // windows, the last starting at 8, past the input: dropped (ONNX Runtime,
  // PyTorch), where it came out as -inf, NaN or 0.
  std::vector<float> x(8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  struct Case {
    const char* op;
    int64_t include_pad;
    std::vector<double> want;
  };
  for (const auto& c : std::vector<Case>{{"MaxPool", 0, {2, 4, 6, 7}},
                                         {"AveragePool", 0, {1, 3, 5, 6.5}},
                                         {"AveragePool", 1, {1, 3, 5, 13.0 / 3.0}}}) {
    Builder m;
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{8}});
    auto& n = m.node(c.op, {"x"}, {"y"}, "pool");
    attr_ints(n, "kernel_shape", {3});
    attr_ints(n, "strides", {2});
    attr_ints(n, "pads", {0, 2});
    attr_i(n, "ceil_mode", 1);
    if (std::string(c.op) == "AveragePool") attr_i(n, "count_include_pad", c.include_pad);
    m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, std::string("n")});
    for (const auto& d : rt.devices()) {
      INFO(c.op << " count_include_pad " << c.include_pad << " on " << d.name());
      auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
      auto got = run_doubles(model, {{"x", sy::TensorData::from(x, {1, 1, 8})}}, "y");
      REQUIRE(got.size() == c.want.size());
      for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(c.want[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("onnx: an integer Range above 2^53 is exact", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  const int64_t big = (int64_t{1} << 53) + 1;  // not a double
  Builder m;
  m.init_i64("s", {big}, {});
  m.init_i64("l", {big + 3}, {});
  m.init_i64("d", {1}, {});
  m.input("x", pb::TensorProto::INT64, {int64_t{3}});
  m.node("Range", {"s", "l", "d"}, {"r"}, "range");
  m.node("Add", {"r", "x"}, {"y"}, "add");
  m.output("y", pb::TensorProto::INT64, {int64_t{3}});
  auto model = sy::onnx::Model::load_bytes(m.bytes(), rt.cpu());
  auto f = model.infer({{"x", sy::TensorData::from(std::vector<int64_t>{0, 0, 0}, {3})}});
  REQUIRE(f.wait_for(kWait));
  CHECK(f.get().at("y").to_vector<int64_t>() == std::vector<int64_t>{big, big + 1, big + 2});
}

TEST_CASE("onnx: a 3-D pool over an input shorter than its window before padding runs", "[onnx]") {
  sy::Runtime rt({.devices = {"cpu:0", "reference:0"}});
  // Depth 2, kernel 3, one pad in front: one window of pad, d0, d1 (ONNX
  // Runtime: [2, 3, 4, 5]); PyTorch's 3-D pools refuse such an input.
  std::vector<float> x(8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  for (const char* op : {"AveragePool", "LpPool"}) {
    Builder m;
    m.input("x", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{2}, int64_t{2}});
    auto& n = m.node(op, {"x"}, {"y"}, "pool");
    attr_ints(n, "kernel_shape", {3, 1, 1});
    attr_ints(n, "pads", {1, 0, 0, 0, 0, 0});
    m.output("y", pb::TensorProto::FLOAT, {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{2}, int64_t{2}});
    const bool lp = std::string(op) == "LpPool";
    const std::vector<double> want = lp ? std::vector<double>{4, std::sqrt(26.0), std::sqrt(40.0), std::sqrt(58.0)}
                                        : std::vector<double>{2, 3, 4, 5};
    for (const auto& d : rt.devices()) {
      INFO(op << " on " << d.name());
      auto model = sy::onnx::Model::load_bytes(m.bytes(), d);
      auto got = run_doubles(model, {{"x", sy::TensorData::from(x, {1, 1, 2, 2, 2})}}, "y");
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
    }
  }
}
