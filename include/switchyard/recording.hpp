// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// switchyard::Recording: the ops of one call recorded once and submitted
/// again, on new inputs, without going through the op entries.

#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "switchyard/messages/std_memory.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard {

namespace detail {
struct RecordingState;
}  // namespace detail

/// The ops a function submits to one device, recorded while it runs and
/// submitted again on new inputs by replay(), as CUDA graphs (and
/// torch.cuda.CUDAGraph) replay kernel launches: a replay skips what the op
/// entries do at the call (shape and dtype rules, handles, the caller's own
/// per-op work, such as a model loader's per-node dispatch) and hands the
/// device all of the recorded ops in one batch.
///
/// A replay is the recorded call with its inputs swapped: the same ops, in
/// the same order, with the same attributes, on tensors of the recorded
/// shapes and dtypes; tensors the function read that were not among its
/// inputs (weights) are the same tensors, kept alive by the recording.
/// Random ops draw new numbers on each replay, as a second call would. A
/// view of a view that nothing else reads runs as one view where the two
/// compose into a strided view (the same elements, fewer copies).
///
/// What cannot be repeated without the function is not recorded: a read to
/// the host (its value could steer the function), a move to another device,
/// ops on two devices, or an input passed twice. record() then still returns
/// the function's results, with a recording that is not replayable() and
/// says why_not().
///
/// Thread-safe: a recording is immutable once made; any number of threads
/// may replay it at once. Only ops submitted by the recording thread count
/// (ops other threads submit meanwhile are theirs).
class Recording {
 public:
  /// Not replayable: why_not() says "empty recording".
  Recording() = default;

  /// Runs `body(inputs)` (any callable taking std::span<const Tensor> and
  /// returning std::vector<Tensor>) as a plain call would: its ops run, its
  /// errors throw. Stores its results in `outputs` and records the ops it
  /// submitted from this thread. At least one input, every input defined
  /// and all on one device, else Error (invalid_argument, invalid_tensor,
  /// device_mismatch) before the body runs. A body that throws propagates
  /// its error and records nothing; recordings do not nest (a record()
  /// inside a body throws invalid_argument).
  template <class Body>
  [[nodiscard]] static Recording record(std::span<const Tensor> inputs, Body&& body, std::vector<Tensor>& outputs) {
    using B = std::remove_reference_t<Body>;
    return record_with(
        inputs, [](void* b, std::span<const Tensor> in) -> std::vector<Tensor> { return (*static_cast<B*>(b))(in); },
        const_cast<void*>(static_cast<const void*>(&body)), outputs);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }

  /// Whether replay() can run.
  [[nodiscard]] bool replayable() const noexcept;
  /// Why replay() cannot run ("" when it can): names what the body did.
  [[nodiscard]] const std::string& why_not() const noexcept;
  /// How many ops (drops included) a replay submits.
  [[nodiscard]] size_t size() const noexcept;

  /// The recorded ops again, on `inputs`: one per recorded input, each
  /// defined (else Error invalid_tensor), on the recorded device
  /// (device_mismatch), of the recorded dtype (dtype_mismatch) and shape
  /// (invalid_argument); a wrong count is invalid_argument; each error names
  /// the input. The device lost or the runtime closed throw as any op does.
  /// Returns the
  /// results at once, as the body returned them: a result that was an
  /// input is that input, one that was read from outside (a weight) is that
  /// tensor, and one the body made is a new tensor.
  ///
  /// The tensors a replay makes take consecutive ids: made()[k]'s
  /// counterpart is `first_made + k`, stored in `first_made` when given
  /// (so a failed op's Error::tensor() can be traced to the recorded op).
  /// Throws Error(invalid_argument) when not replayable().
  [[nodiscard]] std::vector<Tensor> replay(std::span<const Tensor> inputs, TensorId* first_made = nullptr) const;

  /// The ids of the tensors the recorded ops made, ascending.
  [[nodiscard]] std::span<const TensorId> made() const noexcept;

 private:
  using Invoke = std::vector<Tensor> (*)(void* body, std::span<const Tensor> inputs);
  static Recording record_with(std::span<const Tensor> inputs, Invoke invoke, void* body, std::vector<Tensor>& outputs);
  explicit Recording(std::shared_ptr<const detail::RecordingState> state) : state_(std::move(state)) {}
  std::shared_ptr<const detail::RecordingState> state_;
};

}  // namespace switchyard
