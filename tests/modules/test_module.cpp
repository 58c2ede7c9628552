// SPDX-License-Identifier: Apache-2.0
// A backend module for the loader's tests: kind "testmod" (or, built with
// TEST_MODULE_KIND / TEST_MODULE_ABI_SKEW, a module that lies about its kind
// or its ABI). Its backend keeps f32 tensors in host memory and runs one op,
// neg; every other op is unsupported. Built as
// libswitchyard-backend-<kind>.so from public headers and backend.cpp only.

#include <cstring>
#include <memory>
#include <string>

#include "backends/module_loader.hpp"
#include "switchyard/backend.hpp"

#ifndef TEST_MODULE_KIND
#define TEST_MODULE_KIND "testmod"
#endif
#ifndef TEST_MODULE_ABI_SKEW
#define TEST_MODULE_ABI_SKEW 0
#endif

namespace {

using namespace switchyard;
using namespace switchyard::backends;

class HostBytes final : public Buffer {
 public:
  explicit HostBytes(Bytes b) : bytes_(std::move(b)) {}
  [[nodiscard]] size_t size() const noexcept override { return bytes_.size(); }
  [[nodiscard]] const Bytes* host() const noexcept override { return &bytes_; }

 private:
  Bytes bytes_;
};

class NegOnlyBackend final : public Backend {
 public:
  [[nodiscard]] std::string_view kind() const noexcept override { return TEST_MODULE_KIND; }
  [[nodiscard]] bool supports(DType t) const noexcept override { return t == DType::f32; }
  [[nodiscard]] bool supports(OperationIr& op) const override {
    const auto* unary = std::get_if<UnaryOp>(&op.op);
    return (std::holds_alternative<FromDataOp>(op.op) || (unary && unary->kind == UnaryKind::neg)) &&
           Backend::supports(op);
  }
  Expected<BufferPtr> from_data(const TensorIr&, TensorData data) override {
    return std::make_shared<HostBytes>(std::move(data.bytes));
  }
  void to_data(const TensorIr& t, const BufferPtr& buffer, ReadCallback done) override {
    done(TensorData(t.shape, t.dtype, *buffer->host()));
  }
  DeviceError execute(OperationIr& op, std::span<BufferPtr> inputs, std::span<BufferPtr> outputs) override {
    if (auto* up = std::get_if<FromDataOp>(&op.op)) {
      outputs[0] = std::make_shared<HostBytes>(up->data.bytes);
      return {};
    }
    const Bytes& in = *inputs[0]->host();
    Bytes out = Bytes::allocate(in.size());
    const auto* x = reinterpret_cast<const float*>(in.data());
    auto* y = reinterpret_cast<float*>(out.mutable_data());
    for (size_t i = 0; i < in.size() / sizeof(float); ++i) y[i] = -x[i];
    outputs[0] = std::make_shared<HostBytes>(std::move(out));
    return {};
  }
  void seed(uint64_t) override {}
};

BackendKind make_kind() {
  return BackendKind{
      TEST_MODULE_KIND,
      [] { return 2; },
      [] { return std::string{}; },
      [](int, const DeviceOptions&) -> std::unique_ptr<Backend> { return std::make_unique<NegOnlyBackend>(); },
  };
}

}  // namespace

extern "C" const SwitchyardBackendModule* switchyard_backend_module_v1() {
  static const SwitchyardBackendModule description = [] {
    auto d = module_description(TEST_MODULE_KIND, &make_kind);
    d.abi_version += TEST_MODULE_ABI_SKEW;
    return d;
  }();
  return &description;
}
