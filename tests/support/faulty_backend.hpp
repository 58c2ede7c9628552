// SPDX-License-Identifier: Apache-2.0
#pragma once

// Test-only fault injection: a Backend that forwards to a real one (the CPU
// backend) and fails chosen calls. Registered through
// RuntimeOptions::extend_backends under the kind "faulty", so a Runtime with
// devices {"faulty:0"} runs real kernels except where a fault is planned.

#include <atomic>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "switchyard/backend.hpp"
#include "switchyard/runtime.hpp"

namespace switchyard::testing {

/// Which calls fail. Counters are 1-based and shared by every device of the
/// kind; the test thread sets the plan while the runner thread counts, hence
/// atomics. 0 disables a fault.
struct FaultPlan {
  enum class Mode : uint8_t {
    error,      // the backend returns an error (out_of_memory / kernel_failure)
    bad_alloc,  // the backend throws std::bad_alloc
    exception,  // the backend throws std::runtime_error
    foreign,    // the backend throws an int (not a std::exception), from to_data too
  };
  std::atomic<uint64_t> fail_execute_at{0};    // the N-th execute fails
  std::atomic<uint64_t> fail_from_data_at{0};  // the N-th upload (allocation) fails
  std::atomic<uint64_t> fail_to_data_at{0};    // the N-th read or export fails
  std::atomic<Mode> mode{Mode::error};
  // The N-th read or export succeeds but hands back data that does not match
  // the tensor, as a lying remote worker would: the receiver must notice.
  enum class Lie : uint8_t {
    short_bytes,  // right shape and dtype, one byte missing
    wrong_shape,  // self-consistent data of another shape
  };
  std::atomic<uint64_t> lie_to_data_at{0};
  std::atomic<Lie> lie{Lie::short_bytes};

  // The N-th upload "succeeds" with an empty buffer pointer.
  std::atomic<uint64_t> null_from_data_at{0};
  // Element-wise chains fuse as on the inner backend (off: every op runs
  // alone, through execute, as the fault counters expect), and fusible()
  // throws instead of answering.
  std::atomic<bool> fuse{false};
  std::atomic<bool> fusible_throws{false};
  // poll() throws: the device stops as lost.
  std::atomic<bool> poll_throws{false};
  // Reads are never answered: their callbacks are kept here, past the
  // backend and the runtime, as a backend's own queue might keep them.
  std::atomic<bool> hold_reads{false};
  std::mutex held_mutex;
  std::vector<backends::ReadCallback> held_reads;
  // A copy of the runner's waker, kept past the runtime as a backend's own
  // thread might keep it.
  std::mutex kept_mutex;
  std::function<void()> kept_waker;

  std::atomic<uint64_t> executes{0};
  std::atomic<uint64_t> from_datas{0};
  std::atomic<uint64_t> to_datas{0};
  std::atomic<uint64_t> faults{0};  // faults injected so far
};

class FaultyBackend final : public backends::Backend {
 public:
  FaultyBackend(std::unique_ptr<backends::Backend> inner, std::shared_ptr<FaultPlan> plan)
      : inner_(std::move(inner)), plan_(std::move(plan)) {}

  [[nodiscard]] std::string_view kind() const noexcept override { return "faulty"; }
  [[nodiscard]] bool supports(DType t) const noexcept override { return inner_->supports(t); }
  [[nodiscard]] bool supports(OperationIr& op) const override { return inner_->supports(op); }

  [[nodiscard]] backends::Expected<backends::BufferPtr> from_data(const TensorIr& t, TensorData data) override {
    if (hit(plan_->from_datas, plan_->fail_from_data_at)) {
      if (auto err = fault("from_data", Errc::out_of_memory)) return err;
    }
    if (hit_at(plan_->from_datas.load(), plan_->null_from_data_at)) return backends::BufferPtr{};
    return inner_->from_data(t, std::move(data));
  }

  void to_data(const TensorIr& t, const backends::BufferPtr& buffer, backends::ReadCallback done) override {
    if (plan_->hold_reads.load()) {
      std::lock_guard lock(plan_->held_mutex);
      plan_->held_reads.push_back(std::move(done));
      return;
    }
    if (hit(plan_->to_datas, plan_->fail_to_data_at)) {
      if (plan_->mode.load() == FaultPlan::Mode::foreign) {
        plan_->faults.fetch_add(1);
        throw 42;  // NOLINT(hicpp-exception-baseclass): what a careless backend may do
      }
      // Reads report through the callback; the other throwing modes still
      // report an error there, since to_data has no other channel.
      done(backends::DeviceError(Errc::kernel_failure,
                                 "injected fault in to_data #" + std::to_string(plan_->to_datas.load())));
      return;
    }
    if (hit_at(plan_->to_datas.load(), plan_->lie_to_data_at)) {
      inner_->to_data(t, buffer, [lie = plan_->lie.load(), done = std::move(done)](backends::Expected<TensorData> r) {
        if (r) *r = falsify(std::move(*r), lie);
        done(std::move(r));
      });
      return;
    }
    inner_->to_data(t, buffer, std::move(done));
  }

  [[nodiscard]] backends::DeviceError execute(OperationIr& op, std::span<backends::BufferPtr> inputs,
                                              std::span<backends::BufferPtr> outputs) override {
    if (hit(plan_->executes, plan_->fail_execute_at)) {
      if (auto err = fault("execute", Errc::kernel_failure)) return err;
    }
    return inner_->execute(op, inputs, outputs);
  }

  [[nodiscard]] bool fusible(const OperationIr& op) const override {
    if (plan_->fusible_throws.load()) throw std::runtime_error("fusible boom");
    return plan_->fuse.load() && inner_->fusible(op);
  }
  [[nodiscard]] backends::DeviceError execute_fused(std::span<OperationIr> chain, std::span<const TensorIr> tensors,
                                                    std::span<backends::BufferPtr> inputs,
                                                    backends::BufferPtr& output) override {
    return inner_->execute_fused(chain, tensors, inputs, output);
  }

  void seed(uint64_t s) override { inner_->seed(s); }
  void set_waker(std::function<void()> wake) override {
    {
      std::lock_guard lock(plan_->kept_mutex);
      plan_->kept_waker = wake;
    }
    inner_->set_waker(std::move(wake));
  }
  void poll() override {
    if (plan_->poll_throws.load()) throw std::runtime_error("poll boom");
    inner_->poll();
  }
  [[nodiscard]] backends::DeviceError synchronize() override { return inner_->synchronize(); }
  [[nodiscard]] backends::MemoryStats memory() const override { return inner_->memory(); }

 private:
  static bool hit(std::atomic<uint64_t>& counter, const std::atomic<uint64_t>& at) {
    return hit_at(counter.fetch_add(1) + 1, at);
  }
  static bool hit_at(uint64_t n, const std::atomic<uint64_t>& at) { return at.load() != 0 && n == at.load(); }

  static TensorData falsify(TensorData d, FaultPlan::Lie lie) {
    TensorData out;
    out.dtype = d.dtype;
    if (lie == FaultPlan::Lie::short_bytes) {
      out.shape = d.shape;
      out.bytes = Bytes::copy_of(d.bytes.data(), d.bytes.size() - 1);
    } else {
      out.shape = Shape{d.shape.numel()};  // flattened: the bytes still match
      out.bytes = d.bytes;
    }
    return out;
  }

  backends::DeviceError fault(const char* where, Errc code) {
    plan_->faults.fetch_add(1);
    std::string what = std::string("injected fault in ") + where;
    switch (plan_->mode.load()) {
      case FaultPlan::Mode::bad_alloc:
        throw std::bad_alloc();
      case FaultPlan::Mode::exception:
        throw std::runtime_error(what);
      case FaultPlan::Mode::foreign:
        throw 42;  // NOLINT(hicpp-exception-baseclass): what a careless backend may do
      case FaultPlan::Mode::error:
        break;
    }
    return backends::DeviceError(code, what);
  }

  std::unique_ptr<backends::Backend> inner_;
  std::shared_ptr<FaultPlan> plan_;
};

/// Adds the kind "faulty" (the CPU backend behind `plan`) to `options`.
inline void add_faulty_backend(RuntimeOptions& options, std::shared_ptr<FaultPlan> plan) {
  options.extend_backends = [plan](std::vector<backends::BackendKind>& kinds) {
    backends::BackendKind cpu;
    for (const auto& k : kinds)
      if (k.name == "cpu") cpu = k;
    if (!cpu.create) throw std::logic_error("faulty backend: this build has no cpu backend to wrap");
    kinds.push_back(backends::BackendKind{
        "faulty",
        cpu.device_count,
        [] { return std::string{}; },
        [plan, create = cpu.create](int index,
                                    const backends::DeviceOptions& opts) -> std::unique_ptr<backends::Backend> {
          return std::make_unique<FaultyBackend>(create(index, opts), plan);
        },
    });
  };
}

}  // namespace switchyard::testing
