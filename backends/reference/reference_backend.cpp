#include "backends/reference/reference_backend.hpp"

#include "backends/common/host_buffer.hpp"

namespace switchyard::backends::reference {
namespace {

// Placeholder until the op set lands: shares storage with the host backends.
class ReferenceBackend final : public Backend {
 public:
  [[nodiscard]] std::string_view kind() const noexcept override { return "reference"; }
  [[nodiscard]] bool supports(DType) const noexcept override { return true; }
  caf::expected<BufferPtr> from_data(const TensorIr&, TensorData data) override {
    return BufferPtr{std::make_shared<HostBuffer>(std::move(data.bytes))};
  }
  void to_data(const TensorIr& t, const BufferPtr& buffer, ReadCallback done) override {
    done(TensorData(t.shape, t.dtype, *host_bytes(buffer)));
  }
  caf::error execute(OperationIr& op, std::span<BufferPtr>, std::span<BufferPtr>) override {
    return make_error(Errc::unsupported, "reference: " + op.name() + " not implemented yet");
  }
  void seed(uint64_t) override {}
};

}  // namespace

BackendKind backend_kind() {
  return BackendKind{
      "reference",
      [] { return 1 << 16; },
      [] { return std::string{}; },
      [](int, const DeviceOptions&) -> std::unique_ptr<Backend> { return std::make_unique<ReferenceBackend>(); },
  };
}

}  // namespace switchyard::backends::reference
