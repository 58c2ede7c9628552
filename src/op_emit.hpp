// SPDX-License-Identifier: Apache-2.0
#pragma once

// What every client-side op entry does between the call and the queue:
// look at its operand handles, check devices, name the output, submit. Shared
// by tensor.cpp (the Tensor methods) and nn.cpp (the functional NN ops).

#include <string>

#include "core.hpp"
#include "recorder.hpp"
#include "switchyard/messages/op_rules.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::detail {

/// The one door from free functions into a Tensor's handle.
struct TensorAccess {
  static const TensorHandle& handle(const Tensor& t, const char* op) { return t.handle(op); }
  /// Like handle(), but an undefined tensor gives nullptr (optional operands).
  static const TensorHandle* handle_or_null(const Tensor& t) {
    if (auto* recorder = thread_recorder) recorder->saw(t.h_);
    return t.h_.get();
  }
  /// The shared handle itself (a recording keeps what it reads).
  static const std::shared_ptr<TensorHandle>& shared(const Tensor& t) { return t.h_; }
  /// A tensor on an existing handle.
  static Tensor wrap(std::shared_ptr<TensorHandle> h) { return Tensor(std::move(h)); }
};

namespace op_emit {

inline std::string dt(DType t) { return std::string(name_of(t)); }

template <class T>
T unwrap(caf::expected<T> x) {
  if (!x) throw_error(x.error());
  return std::move(*x);
}

/// unwrap() for a call whose rule is another op's (sort through argsort,
/// scatter_reduce through its kind): the error names the op called.
template <class T>
T unwrap_as(const char* op, caf::expected<T> x) {
  if (!x) throw_error_as(op, x.error());
  return std::move(*x);
}

inline TensorIr as_input(const TensorHandle& h) {
  return TensorIr{h.ir.id, h.ir.shape, h.ir.dtype, TensorStatus::read_only};
}

inline TensorIr new_output(const TensorHandle& h, TensorSpec spec) {
  return TensorIr{h.core->new_id(), std::move(spec.shape), spec.dtype, TensorStatus::not_init};
}

inline void same_device(const char* op, const TensorHandle& a, const TensorHandle& b) {
  if (a.core != b.core) throw Error(Errc::device_mismatch, std::string(op) + ": operands belong to different runtimes");
  if (a.device != b.device)
    throw Error(Errc::device_mismatch, std::string(op) + ": operands live on " + a.core->info(a.device).name + " and " +
                                           b.core->info(b.device).name + "; move one with .to(device) first");
}

/// `out` becomes the new tensor's handle: callers that are done with it
/// move it in (one shape copy fewer per op).
inline Tensor emit(const TensorHandle& h, TensorIr out, OperationIr&& op) {
  if (h.core->closed()) throw Error(Errc::runtime_closed, "the runtime is shut down");
  return h.core->emit(h.device, std::move(out), std::move(op));
}

}  // namespace op_emit
}  // namespace switchyard::detail
