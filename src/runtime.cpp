// SPDX-License-Identifier: Apache-2.0
#include <cmath>

#include <caf/all.hpp>

#include "core.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard {

Runtime::Runtime() : Runtime(RuntimeOptions{}) {}

Runtime::Runtime(RuntimeOptions options) : core_(std::make_shared<detail::Core>(std::move(options))) { core_->start(); }

Runtime::~Runtime() {
  if (core_) core_->close();  // null once moved from
}

Runtime& Runtime::operator=(Runtime&& other) noexcept {
  if (this != &other) {
    if (core_) core_->close();
    core_ = std::move(other.core_);
  }
  return *this;
}

detail::Core& Runtime::core() const {
  if (!core_) throw Error(Errc::invalid_argument, "use of a moved-from Runtime");
  return *core_;
}

Device Runtime::cpu(int index) const { return device("cpu:" + std::to_string(index)); }
Device Runtime::cuda(int index) const { return device("cuda:" + std::to_string(index)); }
Device Runtime::reference(int index) const { return device("reference:" + std::to_string(index)); }

Device Runtime::device(std::string_view name) const {
  (void)core();
  if (auto id = core_->find(name)) return Device(core_, *id);
  std::string have;
  for (DeviceId i = 0; i < core_->device_count(); ++i) {
    if (core_->lost(i)) {
      if (core_->info(i).name == name) throw Error(Errc::device_lost, *core_->lost(i));
      continue;
    }
    have += (have.empty() ? "" : ", ") + core_->info(i).name;
  }
  throw Error(Errc::unknown_device, "unknown device '" + std::string(name) + "' (this runtime has: " + have + ")");
}

std::vector<Device> Runtime::devices() const {
  (void)core();
  std::vector<Device> out;
  for (DeviceId i = 0; i < core_->device_count(); ++i)
    if (!core_->lost(i)) out.push_back(Device(core_, i));
  return out;
}

std::vector<Device> Runtime::connect(const std::string& host, uint16_t port) {
  // The core held for the whole call, read from this object once: the
  // runtime may be destroyed on another thread while the handshake waits
  // (close() then fails it), and nothing after that may touch the Runtime
  // or a Core it was the last holder of.
  (void)core();
  const std::shared_ptr<detail::Core> held = core_;
  std::vector<Device> out;
  for (auto id : held->connect(host, port)) out.push_back(Device(held, id));
  return out;
}

std::vector<std::string> Runtime::unavailable() const { return core().unavailable(); }

Future<void> Runtime::sync_all() const {
  // Chains the devices' syncs; the first failure fails the whole.
  (void)core();
  Promise<void> done;
  auto result = done.future();
  auto devices = this->devices();
  auto remaining = std::make_shared<std::atomic<size_t>>(devices.size());
  if (*remaining == 0) {
    done.set_value();
    return result;
  }
  for (const auto& d : devices) {
    auto f = core_->sync(d.id());
    f.on_complete([done, remaining](const std::exception_ptr& e) {
      if (e) done.set_error(e);
      if (remaining->fetch_sub(1) == 1) done.set_value();
    });
  }
  return result;
}

std::vector<DeviceStats> Runtime::stats() const {
  std::vector<Future<DeviceStats>> futures;
  for (const auto& d : devices()) futures.push_back(core_->stats(d.id()));
  std::vector<DeviceStats> out;
  out.reserve(futures.size());
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

// --- Device --------------------------------------------------------------

const std::string& Device::name() const {
  if (!core_) throw Error(Errc::unknown_device, "use of an empty Device");
  return core_->info(id_).name;
}

std::string Device::kind() const {
  if (!core_) throw Error(Errc::unknown_device, "use of an empty Device");
  return core_->info(id_).kind;
}

bool Device::lost() const {
  if (!core_) throw Error(Errc::unknown_device, "use of an empty Device");
  return core_->lost(id_) != nullptr;
}

DTypeSupport Device::dtype_support(DType t) const {
  if (!core_) throw Error(Errc::unknown_device, "use of an empty Device");
  return core_->dtype_support(id_, t);
}

namespace {
detail::Core& core_of(const std::shared_ptr<detail::Core>& c) {
  if (!c) throw Error(Errc::unknown_device, "use of an empty Device");
  if (c->closed()) throw Error(Errc::runtime_closed, "the runtime is shut down");
  return *c;
}

Tensor create(const std::shared_ptr<detail::Core>& c, DeviceId d, TensorIr ir, OperationIr op) {
  return core_of(c).emit(d, std::move(ir), std::move(op));
}

TensorIr new_tensor(detail::Core& c, Shape s, DType t) {
  // Negative extents, more than 16 axes, and element counts whose product
  // overflows (zeros({1 << 40, 1 << 40})) fail here, at the call.
  if (auto err = check_shape(s, "tensor")) detail::throw_error(err);
  if (!is_valid(t)) throw Error(Errc::dtype_mismatch, "invalid dtype " + std::to_string(static_cast<int>(t)));
  return TensorIr{c.new_id(), std::move(s), t, TensorStatus::not_init};
}
}  // namespace

void Device::check_values(size_t count, const Shape& shape) {
  if (auto err = check_shape(shape, "tensor")) detail::throw_error(err);
  if (static_cast<int64_t>(count) != shape.numel())
    throw Error(Errc::shape_mismatch, "tensor: " + std::to_string(count) + " values do not fill shape " +
                                          shape.to_string() + " (" + std::to_string(shape.numel()) + " elements)");
}

Tensor Device::from_data(TensorData data) const {
  auto& c = core_of(core_);
  if (auto err = check_shape(data.shape, "from_data")) detail::throw_error(err);
  auto want = static_cast<size_t>(data.shape.numel()) * size_of(data.dtype);
  if (data.bytes.size() != want)
    throw Error(Errc::shape_mismatch, "from_data: " + std::to_string(data.bytes.size()) + " bytes for shape " +
                                          data.shape.to_string() + " of " + std::string(name_of(data.dtype)));
  canonicalize_bools(data);  // a caller's own bool bytes may hold values other than 0 and 1
  auto ir = new_tensor(c, data.shape, data.dtype);
  return create(core_, id_, ir, FromDataOp{ir, std::move(data)});
}

Tensor Device::full(Shape shape, double value, DType dtype) const {
  auto ir = new_tensor(core_of(core_), std::move(shape), dtype);
  return create(core_, id_, ir, FillOp{FillKind::full, ir, value, 0});
}
Tensor Device::zeros(Shape shape, DType dtype) const { return full(std::move(shape), 0, dtype); }
Tensor Device::ones(Shape shape, DType dtype) const { return full(std::move(shape), 1, dtype); }

Tensor Device::arange(double start, double end, double step, DType dtype) const {
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(end))
    throw Error(Errc::invalid_argument, "arange: step must be non-zero and finite, and bounds finite");
  if ((step > 0 && end < start) || (step < 0 && end > start))
    throw Error(Errc::invalid_argument, "arange(" + std::to_string(start) + ", " + std::to_string(end) + ", " +
                                            std::to_string(step) + "): the bounds run against the step's sign");
  // PyTorch's rule for integer dtypes: start and step truncated to integers
  // first; the count from the truncated bounds for i64 and from the given
  // ones for the narrower types (arange(-3, 3, 1.5) is -3..2 in i64 and
  // -3, -2, -1, 0 in i32).
  double count = std::ceil((end - start) / step);
  if (!is_floating(dtype) && !is_bool(dtype)) {
    if (std::trunc(step) == 0)
      throw Error(Errc::invalid_argument,
                  "arange: step " + std::to_string(step) + " truncates to 0 in " + std::string(name_of(dtype)));
    if (dtype == DType::i64) count = std::ceil((std::trunc(end) - std::trunc(start)) / std::trunc(step));
    start = std::trunc(start);
    step = std::trunc(step);
  }
  count = std::max(0.0, count);
  // Checked as a double: a count of 2^63 or more does not convert.
  if (!(count < 9223372036854775808.0))
    throw Error(Errc::shape_mismatch, "arange(" + std::to_string(start) + ", " + std::to_string(end) + ", " +
                                          std::to_string(step) + "): " + std::to_string(count) +
                                          " elements, more than a tensor can hold");
  auto n = static_cast<int64_t>(count);
  auto ir = new_tensor(core_of(core_), Shape{n}, dtype);
  return create(core_, id_, ir, FillOp{FillKind::arange, ir, start, step});
}

Tensor Device::eye(int64_t n, int64_t m, DType dtype) const {
  auto ir = new_tensor(core_of(core_), Shape{n, m < 0 ? n : m}, dtype);
  return create(core_, id_, ir, FillOp{FillKind::eye, ir, 1, 0});
}

Tensor Device::uniform(Shape shape, double low, double high, DType dtype) const {
  if (!is_floating(dtype))
    throw Error(Errc::dtype_mismatch, "uniform: needs a floating dtype, got " + std::string(name_of(dtype)));
  if (!(low <= high))
    throw Error(Errc::invalid_argument,
                "uniform: low " + std::to_string(low) + " must not exceed high " + std::to_string(high));
  auto ir = new_tensor(core_of(core_), std::move(shape), dtype);
  return create(core_, id_, ir, RandomOp{RandomKind::uniform, ir, low, high});
}

Tensor Device::normal(Shape shape, double mean, double stddev, DType dtype) const {
  if (!is_floating(dtype))
    throw Error(Errc::dtype_mismatch, "normal: needs a floating dtype, got " + std::string(name_of(dtype)));
  if (!(stddev >= 0) || std::isnan(mean))
    throw Error(Errc::invalid_argument, "normal: stddev must be >= 0 and mean a number, got mean " +
                                            std::to_string(mean) + " and stddev " + std::to_string(stddev));
  auto ir = new_tensor(core_of(core_), std::move(shape), dtype);
  return create(core_, id_, ir, RandomOp{RandomKind::normal, ir, mean, stddev});
}

Tensor Device::bernoulli(Shape shape, double p, DType dtype) const {
  if (!(p >= 0 && p <= 1))
    throw Error(Errc::invalid_argument, "bernoulli: probability " + std::to_string(p) + " is outside [0, 1]");
  auto ir = new_tensor(core_of(core_), std::move(shape), dtype);
  return create(core_, id_, ir, RandomOp{RandomKind::bernoulli, ir, p, 0});
}

void Device::seed(uint64_t seed) const {
  // Not an op, so emit's check does not cover it: a lost device throws here.
  auto& core = core_of(core_);
  core.check_usable(id_);
  core.submit(id_, SeedOp{seed});
}

Future<void> Device::sync() const { return core_of(core_).sync(id_); }

Future<DeviceStats> Device::stats() const { return core_of(core_).stats(id_); }
Future<void> Device::trim() const { return core_of(core_).trim(id_); }

}  // namespace switchyard
