// SPDX-License-Identifier: Apache-2.0
// Recording::record and Recording::replay (recording.hpp): a body's ops are
// kept with their tensor ids rewritten as references (to a tensor the ops
// make, to an input, or to a held outside tensor), so that a replay only
// copies them, fills in fresh ids and queues them in one go.

#include "switchyard/recording.hpp"

#include <algorithm>
#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "core.hpp"
#include "op_emit.hpp"
#include "recorder.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard {

namespace detail {

namespace {

// A recorded op's tensor ids, rewritten: a tensor the recording made is
// `placed | its rank in made`, input i is `placed | (made.size() + i)`, and
// a tensor from outside keeps its id (a runtime's ids have bit 63 clear:
// Core's random prefix leaves it out). 0 stays "absent".
constexpr uint64_t placed = uint64_t{1} << 63;

}  // namespace

struct RecordingState {
  std::shared_ptr<Core> core;
  DeviceId device = 0;
  struct InputSpec {
    Shape shape;
    DType dtype = DType::f32;
  };
  std::vector<InputSpec> inputs;
  std::vector<OperationIr> ops;                     // ids rewritten (above)
  std::vector<TensorId> made;                       // as recorded, ascending
  std::vector<TensorIr> made_ir;                    // by rank: what a result that was made looks like
  std::vector<std::shared_ptr<TensorHandle>> held;  // outside tensors the ops read, results from outside
  struct Result {
    enum class Kind : uint8_t { undefined, made, input, held } kind = Kind::undefined;
    uint64_t index = 0;
  };
  std::vector<Result> results;
  std::string why_not;
  bool heavy = false;  // some op starts early (Core::starts_early)
};

void Recorder::saw(const std::shared_ptr<TensorHandle>& h) {
  // Not the body's own tensors: holding them would delay their drops past
  // their last use (no reuse in place, no fusion into their store), so the
  // recording run would not be the run a replay repeats.
  if (h && h->core.get() == core_ && !made_.contains(h->ir.id.value)) seen_.try_emplace(h->ir.id.value, h);
}

void Recorder::refuse(std::string why) {
  if (refused_.empty()) refused_ = std::move(why);
}

void Recorder::op(const Core* core, DeviceId device, const OperationIr& op) {
  if (core != core_) {
    if (refused_.empty()) refused_ = "it submitted an op (" + op.name() + ") to another runtime";
    return;
  }
  if (!refused_.empty()) return;
  if (device != device_) {
    refused_ =
        "it submitted ops to two devices (" + core_->info(device_).name + " and " + core_->info(device).name + ")";
    return;
  }
  ops_.push_back(op);
  // A replayed recording's ops come with their last uses marked and those
  // drops gone: such an input is dropped here as well.
  ops_.back().each_input([&](const TensorIr& t) {
    if (t.status == TensorStatus::read_write && made_.contains(t.id.value)) dropped_.insert(t.id.value);
  });
  ops_.back().each_output([&](TensorIr& t) { made_.insert(t.id.value); });
}

void Recorder::drop(const Core* core, DeviceId device, TensorId id) {
  if (core != core_ || !refused_.empty() || !made_.contains(id.value)) return;
  if (device == device_ && dropped_.insert(id.value).second) ops_.emplace_back(DropOp{id});
}

std::shared_ptr<TensorHandle> Recorder::handle_of(TensorId id) const {
  auto it = seen_.find(id.value);
  return it == seen_.end() ? nullptr : it->second;
}

namespace {

// Makes the recorder the calling thread's for its lifetime.
class ActiveRecorder {
 public:
  explicit ActiveRecorder(Recorder& r) {
    if (thread_recorder != nullptr)
      throw Error(Errc::invalid_argument, "record: this thread is already recording (recordings do not nest)");
    thread_recorder = &r;
  }
  ~ActiveRecorder() { thread_recorder = nullptr; }
  ActiveRecorder(const ActiveRecorder&) = delete;
  ActiveRecorder& operator=(const ActiveRecorder&) = delete;
};

// A view of a view that only it reads becomes one view of the first one's
// input where that is a strided view (compose_views): an exported attention
// slices, reshapes and transposes its heads, three ops and two copies for
// what one strided copy does. `ops` have their ids rewritten (made tensors
// are `placed | rank`); returns, per made tensor, whether no op makes it now.
std::vector<char> compose_view_chains(std::vector<OperationIr>& ops, size_t made, const std::vector<char>& returned) {
  std::vector<char> gone(made, 0);
  auto rank_of = [&](const TensorIr& t) -> std::optional<uint64_t> {
    if ((t.id.value & placed) == 0) return std::nullopt;
    const uint64_t k = t.id.value & ~placed;
    return k < made ? std::optional<uint64_t>(k) : std::nullopt;
  };
  std::vector<uint32_t> reads(made, 0);
  std::vector<size_t> producer(made, SIZE_MAX);
  for (size_t n = 0; n < ops.size(); ++n) {
    if (std::holds_alternative<DropOp>(ops[n].op)) continue;
    ops[n].each_input([&](const TensorIr& t) {
      if (auto k = rank_of(t)) ++reads[*k];
    });
    ops[n].each_output([&](const TensorIr& t) {
      if (auto k = rank_of(t)) producer[*k] = n;
    });
  }
  std::vector<char> removed(ops.size(), 0);
  for (size_t j = 0; j < ops.size(); ++j) {
    auto* second = std::get_if<ViewOp>(&ops[j].op);
    if (second == nullptr) continue;
    const auto mid = rank_of(second->in);
    if (!mid || reads[*mid] != 1 || returned[*mid] || second->in.status != TensorStatus::read_only) continue;
    const size_t i = producer[*mid];
    auto* first = i < j ? std::get_if<ViewOp>(&ops[i].op) : nullptr;
    if (first == nullptr || first->in.status != TensorStatus::read_only) continue;
    // No op in between may free the first view's input (a nested replay's
    // ops come with their last uses marked).
    bool freed_between = false;
    for (size_t n = i + 1; n < j && !freed_between; ++n)
      if (!removed[n])
        ops[n].each_input(
            [&](const TensorIr& t) { freed_between |= t.id == first->in.id && t.status == TensorStatus::read_write; });
    if (freed_between) continue;
    auto composed = compose_views({first->offset, first->strides}, first->out.shape, {second->offset, second->strides},
                                  second->out.shape);
    if (!composed) continue;
    const TensorIr source = first->in;
    second->in = source;
    second->offset = composed->offset;
    second->strides = std::move(composed->strides);
    removed[i] = 1;
    // The first view's input must live until the second reads it: a drop
    // of it between the two moves after the second.
    for (size_t n = i + 1; n < j; ++n)
      if (auto* d = std::get_if<DropOp>(&ops[n].op); d != nullptr && d->id == source.id && !removed[n]) {
        removed[n] = 1;
        ops.insert(ops.begin() + static_cast<ptrdiff_t>(j) + 1, OperationIr(DropOp{source.id}));
        removed.insert(removed.begin() + static_cast<ptrdiff_t>(j) + 1, 0);
        for (auto& p : producer)
          if (p != SIZE_MAX && p > j) ++p;
      }
    gone[*mid] = 1;
    reads[*mid] = 0;
    for (size_t n = j + 1; n < ops.size(); ++n)
      if (auto* d = std::get_if<DropOp>(&ops[n].op); d != nullptr && rank_of(TensorIr{d->id, {}, {}, {}}) == mid)
        removed[n] = 1;
  }
  size_t kept = 0;
  for (size_t n = 0; n < ops.size(); ++n)
    if (!removed[n]) {
      if (kept != n) ops[kept] = std::move(ops[n]);  // not onto itself: that empties its vectors
      ++kept;
    }
  ops.resize(kept);
  return gone;
}

// The state of a finished recording: `r`'s ops with their ids rewritten,
// or why they cannot be replayed.
std::shared_ptr<RecordingState> finish(Recorder& r, std::span<const Tensor> inputs, const std::vector<Tensor>& results,
                                       const std::shared_ptr<Core>& core) {
  auto s = std::make_shared<RecordingState>();
  s->core = core;
  auto refuse = [&](std::string why) {
    s->why_not = std::move(why);
    s->ops.clear();
    s->held.clear();
    return s;
  };
  if (!r.refused().empty()) return refuse(r.refused());
  s->device = r.device();

  std::unordered_map<uint64_t, uint64_t> input_index;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& h = *TensorAccess::shared(inputs[i]);
    s->inputs.push_back({h.ir.shape, h.ir.dtype});
    if (auto [at, fresh] = input_index.try_emplace(h.ir.id.value, i); !fresh)
      return refuse("inputs " + std::to_string(at->second) + " and " + std::to_string(i) + " are the same tensor");
  }

  s->made.reserve(r.made().size());
  for (uint64_t id : r.made()) s->made.push_back(TensorId{id});
  std::sort(s->made.begin(), s->made.end(), [](TensorId a, TensorId b) { return a.value < b.value; });
  std::unordered_map<uint64_t, uint64_t> rank;
  for (size_t k = 0; k < s->made.size(); ++k) rank.emplace(s->made[k].value, k);
  s->made_ir.resize(s->made.size());

  std::unordered_map<uint64_t, size_t> held_index;
  auto hold = [&](std::shared_ptr<TensorHandle> h) {
    auto [at, fresh] = held_index.try_emplace(h->ir.id.value, s->held.size());
    if (fresh) s->held.push_back(std::move(h));
    return at->second;
  };

  // Results first: a tensor the body made and returned is not dropped at
  // the end of a replay.
  std::vector<char> returned(s->made.size(), 0);
  for (size_t k = 0; k < results.size(); ++k) {
    RecordingState::Result res;
    if (const auto& h = TensorAccess::shared(results[k])) {
      if (h->core != core) return refuse("result " + std::to_string(k) + " belongs to another runtime");
      if (auto m = rank.find(h->ir.id.value); m != rank.end()) {
        res = {RecordingState::Result::Kind::made, m->second};
        returned[m->second] = 1;
      } else if (auto in = input_index.find(h->ir.id.value); in != input_index.end()) {
        res = {RecordingState::Result::Kind::input, in->second};
      } else {
        res = {RecordingState::Result::Kind::held, hold(h)};
      }
    }
    s->results.push_back(res);
  }

  std::string why;
  auto rewrite_input = [&](TensorIr& t, const OperationIr& op, size_t n) {
    if (!t.id || !why.empty()) return;
    if (auto m = rank.find(t.id.value); m != rank.end()) {
      t.id.value = placed | m->second;
    } else if (auto in = input_index.find(t.id.value); in != input_index.end()) {
      t.id.value = placed | (s->made.size() + in->second);
    } else if (auto h = r.handle_of(t.id); h != nullptr && h->device == s->device && (t.id.value & placed) == 0) {
      hold(std::move(h));
    } else {
      why = "op " + std::to_string(n) + " (" + op.name() + ") reads tensor " + std::to_string(t.id.value) +
            ", which is neither an input nor a tensor the body used";
    }
  };
  s->ops = std::move(r.ops());
  for (size_t n = 0; n < s->ops.size() && why.empty(); ++n) {
    auto& op = s->ops[n];
    if (auto* d = std::get_if<DropOp>(&op.op)) {
      d->id.value = placed | rank.at(d->id.value);
      continue;
    }
    op.each_input([&](TensorIr& t) { rewrite_input(t, op, n); });
    op.each_output([&](TensorIr& t) {
      const uint64_t k = rank.at(t.id.value);
      s->made_ir[k] = TensorIr{t.id, t.shape, t.dtype, TensorStatus::read_only};
      t.id.value = placed | k;
    });
  }
  if (!why.empty()) return refuse(why);
  std::vector<char> gone = compose_view_chains(s->ops, s->made.size(), returned);
  // What the body made and neither dropped nor returned is dropped once the
  // ops have run (a recording run drops it later, when its last handle goes).
  for (size_t k = 0; k < s->made.size(); ++k)
    if (!returned[k] && !gone[k] && !r.dropped().contains(s->made[k].value))
      s->ops.emplace_back(DropOp{TensorId{placed | k}});
  core->mark_recorded_last_uses(s->ops);
  s->heavy = std::any_of(s->ops.begin(), s->ops.end(), [](const OperationIr& op) { return Core::starts_early(op); });
  return s;
}

}  // namespace

}  // namespace detail

using detail::RecordingState;
using detail::TensorAccess;

Recording Recording::record_with(std::span<const Tensor> inputs, Invoke invoke, void* body,
                                 std::vector<Tensor>& outputs) {
  std::shared_ptr<detail::Core> core;
  std::optional<DeviceId> device;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& h = TensorAccess::shared(inputs[i]);
    if (!h) throw Error(Errc::invalid_tensor, "record: input " + std::to_string(i) + " is an undefined tensor");
    if (core && (h->core != core || h->device != *device))
      throw Error(Errc::device_mismatch, "record: input " + std::to_string(i) + " is on " +
                                             h->core->info(h->device).name + ", input 0 on " +
                                             core->info(*device).name + " (a recording uses one device)");
    core = h->core;
    device = h->device;
  }
  if (!core) throw Error(Errc::invalid_argument, "record: no inputs (a recording needs one to name its device)");
  detail::Recorder recorder(core.get());
  recorder.set_device(*device);
  std::vector<Tensor> results;
  {
    detail::ActiveRecorder active(recorder);
    results = invoke(body, inputs);
  }
  auto state = detail::finish(recorder, inputs, results, core);
  outputs = std::move(results);
  return Recording(std::move(state));
}

bool Recording::replayable() const noexcept { return state_ && state_->why_not.empty(); }

const std::string& Recording::why_not() const noexcept {
  static const std::string empty_recording = "empty recording";
  return state_ ? state_->why_not : empty_recording;
}

size_t Recording::size() const noexcept { return state_ ? state_->ops.size() : 0; }

std::span<const TensorId> Recording::made() const noexcept {
  return state_ ? std::span<const TensorId>(state_->made) : std::span<const TensorId>();
}

std::vector<Tensor> Recording::replay(std::span<const Tensor> inputs, TensorId* first_made) const {
  if (!replayable()) throw Error(Errc::invalid_argument, "replay: the recording is not replayable: " + why_not());
  const auto& s = *state_;
  auto& core = *s.core;
  if (inputs.size() != s.inputs.size())
    throw Error(Errc::invalid_argument, "replay: the recording takes " + std::to_string(s.inputs.size()) +
                                            " inputs, given " + std::to_string(inputs.size()));
  boost::container::small_vector<uint64_t, 8> ids(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto* h = TensorAccess::handle_or_null(inputs[i]);
    const auto at = "replay: input " + std::to_string(i);
    if (h == nullptr) throw Error(Errc::invalid_tensor, at + " is an undefined tensor");
    if (h->core != s.core || h->device != s.device)
      throw Error(Errc::device_mismatch,
                  at + " is on " + h->core->info(h->device).name + ", recorded on " + core.info(s.device).name);
    const auto& want = s.inputs[i];
    if (h->ir.dtype != want.dtype)
      throw Error(Errc::dtype_mismatch, at + " is " + std::string(name_of(h->ir.dtype)) + ", recorded as " +
                                            std::string(name_of(want.dtype)));
    if (h->ir.shape != want.shape)
      throw Error(Errc::invalid_argument,
                  at + " has shape " + h->ir.shape.to_string() + ", recorded as " + want.shape.to_string());
    ids[i] = h->ir.id.value;
  }
  if (core.closed()) throw Error(Errc::runtime_closed, "the runtime is shut down");
  core.check_usable(s.device);
  const uint64_t base = core.new_ids(s.made.size()).value;
  const uint64_t made = s.made.size();
  auto place = [&](TensorId& id) {
    if ((id.value & detail::placed) == 0) return;
    const uint64_t k = id.value & ~detail::placed;
    id.value = k < made ? base + k : ids[k - made];
  };
  std::vector<OperationIr> ops = s.ops;
  for (auto& op : ops) {
    if (auto* d = std::get_if<DropOp>(&op.op)) {
      place(d->id);
      continue;
    }
    op.each_input([&](TensorIr& t) { place(t.id); });
    op.each_output([&](TensorIr& t) { place(t.id); });
  }
  // Inside another recording's body: what this one holds, that one must.
  if (auto* recorder = detail::thread_recorder)
    for (const auto& h : s.held) recorder->saw(h);
  core.submit_recorded(s.device, std::move(ops), s.heavy);
  if (first_made != nullptr) *first_made = TensorId{base};

  std::vector<Tensor> out(s.results.size());
  // A tensor returned twice is one handle (two would drop it twice).
  boost::container::small_vector<std::pair<uint64_t, size_t>, 4> made_out;
  for (size_t k = 0; k < s.results.size(); ++k) {
    const auto& res = s.results[k];
    switch (res.kind) {
      case RecordingState::Result::Kind::undefined:
        break;
      case RecordingState::Result::Kind::input:
        out[k] = inputs[res.index];
        break;
      case RecordingState::Result::Kind::held:
        out[k] = TensorAccess::wrap(s.held[res.index]);
        break;
      case RecordingState::Result::Kind::made: {
        auto same = std::find_if(made_out.begin(), made_out.end(), [&](const auto& e) { return e.first == res.index; });
        if (same != made_out.end()) {
          out[k] = out[same->second];
          break;
        }
        TensorIr ir = s.made_ir[res.index];
        ir.id = TensorId{base + res.index};
        out[k] = core.adopt(s.device, std::move(ir));
        made_out.emplace_back(res.index, k);
        break;
      }
    }
  }
  return out;
}

}  // namespace switchyard
