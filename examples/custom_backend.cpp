// SPDX-License-Identifier: Apache-2.0
// A custom backend through the public extension point (switchyard/backend.hpp):
// kind "tiny", f32 tensors in host memory, element-wise add and mul of
// equal shapes. Ops it does not run are refused by supports(), so the
// client gets an `unsupported` error instead of a wrong result.
//
//   RuntimeOptions::extend_backends --adds--> BackendKind "tiny"
//   devices {"cpu:0", "tiny:0"} --> a runner per device --> TinyBackend::execute
#include <cstdio>
#include <memory>
#include <vector>

#include <switchyard/backend.hpp>
#include <switchyard/switchyard.hpp>

namespace sy = switchyard;
namespace sb = switchyard::backends;

// A buffer is the bytes of one tensor; host() lets the runtime read and
// bridge them without asking the backend.
class TinyBuffer final : public sb::Buffer {
 public:
  explicit TinyBuffer(sy::Bytes bytes) : bytes_(std::move(bytes)) {}
  size_t size() const noexcept override { return bytes_.size(); }
  const sy::Bytes* host() const noexcept override { return &bytes_; }

 private:
  sy::Bytes bytes_;
};

class TinyBackend final : public sb::Backend {
 public:
  std::string_view kind() const noexcept override { return "tiny"; }
  bool supports(sy::DType t) const noexcept override { return t == sy::DType::f32; }
  // Uploads, and add / mul of two tensors of one shape (no broadcasting).
  bool supports(sy::OperationIr& op) const override {
    if (std::holds_alternative<sy::FromDataOp>(op.op)) return Backend::supports(op);
    const auto* b = std::get_if<sy::BinaryOp>(&op.op);
    return b != nullptr && (b->kind == sy::BinaryKind::add || b->kind == sy::BinaryKind::mul) &&
           b->lhs.shape == b->rhs.shape && Backend::supports(op);
  }
  sb::Expected<sb::BufferPtr> from_data(const sy::TensorIr&, sy::TensorData data) override {
    return std::make_shared<TinyBuffer>(std::move(data.bytes));
  }
  void to_data(const sy::TensorIr& t, const sb::BufferPtr& buffer, sb::ReadCallback done) override {
    done(sy::TensorData(t.shape, t.dtype, *buffer->host()));
  }
  sb::DeviceError execute(sy::OperationIr& op, std::span<sb::BufferPtr> inputs,
                          std::span<sb::BufferPtr> outputs) override {
    if (auto* upload = std::get_if<sy::FromDataOp>(&op.op)) {
      outputs[0] = std::make_shared<TinyBuffer>(upload->data.bytes);
      return {};
    }
    const auto& b = std::get<sy::BinaryOp>(op.op);  // supports() let nothing else through
    const auto* x = inputs[0]->host()->as<float>();
    const auto* y = inputs[1]->host()->as<float>();
    auto out = sy::Bytes::allocate(inputs[0]->size());
    auto* z = out.mutable_as<float>();
    for (size_t i = 0; i < out.size() / sizeof(float); ++i)
      z[i] = b.kind == sy::BinaryKind::add ? x[i] + y[i] : x[i] * y[i];
    outputs[0] = std::make_shared<TinyBuffer>(std::move(out));
    return {};  // no error
  }
  void seed(uint64_t) override {}  // no random ops here
};

int main() {
  sy::RuntimeOptions options;
  options.devices = {"cpu:0", "tiny:0"};
  options.extend_backends = [](std::vector<sb::BackendKind>& kinds) {
    kinds.push_back(sb::BackendKind{
        "tiny",
        [] { return 1; },              // devices of this kind
        [] { return std::string{}; },  // why there are none (never here)
        [](int, const sb::DeviceOptions&) -> std::unique_ptr<sb::Backend> { return std::make_unique<TinyBackend>(); },
    });
  };
  sy::Runtime rt(options);
  auto tiny = rt.device("tiny:0");
  auto a = tiny.tensor(std::vector<float>{1, 2, 3}, {3});
  auto b = tiny.tensor(std::vector<float>{4, 5, 6}, {3});
  auto c = a * b + a;                                      // runs on tiny:0
  const float total = c.to(rt.cpu()).sum().item<float>();  // bridged to cpu:0: 5 + 12 + 21
  bool refused = false;
  try {
    (void)(a - b).to_vector<float>();  // sub: not supported by tiny
  } catch (const sy::Error& e) {
    refused = e.code() == sy::Errc::unsupported;
  }
  if (c.to_vector<float>() != std::vector<float>{5, 12, 21} || total != 38.0f || !refused) {
    std::fprintf(stderr, "custom_backend: wrong result\n");
    return 1;
  }
  std::printf("custom_backend: a * b + a on tiny:0 = [5, 12, 21], sum on cpu:0 = 38; sub refused\n");
  return 0;
}
