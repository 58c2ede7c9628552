// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/cpu_backend.hpp"

#include <algorithm>
#include <array>
#include <cblas.h>
#include <memory>
#include <thread>

#include "backends/cpu/bf16_gemm.hpp"
#include "backends/cpu/chain_heads.hpp"
#include "backends/cpu/kernels.hpp"
#include "backends/cpu/packed_weights.hpp"
#include "switchyard/messages/host_cpus.hpp"

namespace switchyard::backends::cpu {
namespace {

/// An op's input buffers as the kernels take them (Inputs): their bytes and
/// whether each may be overwritten in place. Held inline for the usual few.
class HostInputs {
 public:
  explicit HostInputs(size_t count) {
    if (count > small_bytes_.size()) {
      many_bytes_.resize(count);
      many_consumable_.resize(count);
      bytes_ = many_bytes_.data();
      consumable_ = reinterpret_cast<bool*>(many_consumable_.data());
    }
  }
  HostInputs(const HostInputs&) = delete;
  HostInputs& operator=(const HostInputs&) = delete;

  void add(const TensorIr& t, const BufferPtr& buffer) {
    bytes_[count_] = host_bytes(buffer);
    if (bytes_[count_] == nullptr && !error)
      error = DeviceError(Errc::invalid_tensor, "cpu: input buffer of another backend");
    consumable_[count_] = bytes_[count_] != nullptr && reusable(t, buffer);
    ++count_;
  }
  [[nodiscard]] std::span<const Bytes*> bytes() { return {bytes_, count_}; }
  [[nodiscard]] std::span<bool> consumable() { return {consumable_, count_}; }
  [[nodiscard]] Inputs view() const {
    return {std::span<const Bytes* const>(bytes_, count_), std::span<const bool>(consumable_, count_)};
  }

  DeviceError error;  // the first input that is no host buffer

 private:
  // Not zeroed: only the first count_ are read, each written by add() first.
  std::array<const Bytes*, 8> small_bytes_;
  std::array<bool, 8> small_consumable_;
  std::vector<const Bytes*> many_bytes_;
  std::vector<char> many_consumable_;  // not vector<bool>: its elements have no address
  const Bytes** bytes_ = small_bytes_.data();
  bool* consumable_ = small_consumable_.data();
  size_t count_ = 0;
};

class CpuBackend final : public HostBackend {
 public:
  explicit CpuBackend(const DeviceOptions& options)
      : pool_(options.threads == 0 ? static_cast<unsigned>(available_cpus()) : options.threads),
        buffers_(options.cache_limit, options.memory_limit),
        packed_(options.cache_limit),
        ctx_{pool_, buffers_, 0, 0, &packed_} {
    // GEMM runs on the runner's thread while this device's pool is idle, so
    // OpenBLAS may use as many threads as the pool has, and no more: its
    // default (every core) would put four busy threads on two cores when
    // two CPU devices multiply at once. The setting is process-wide; the
    // runtime gives every CPU device the same share, so all agree.
    openblas_set_num_threads(static_cast<int>(pool_.threads()));
  }

  [[nodiscard]] std::string_view kind() const noexcept override { return "cpu"; }
  using HostBackend::supports;  // supports(DType), not hidden by the overload below
  // Every op on every dtype (a host backend stores them all), which the
  // interface's default finds by visiting the op twice and asking about each
  // tensor's dtype, ~70 instructions per op.
  [[nodiscard]] bool supports(OperationIr&) const override { return true; }
  DeviceError execute(OperationIr& op, std::span<BufferPtr> inputs, std::span<BufferPtr> outputs) override {
    // x = x + 1 on a few floats: computed in the last-use input's block and
    // its buffer handed on, as below, but without the general path (the
    // inputs' arrays, widen_halves, the op's visit, Expected<Bytes> and the
    // hand-on loop), which was ~500 of the ~690 instructions of such an op.
    if (auto* s = std::get_if<ScalarOp>(&op.op); s != nullptr && inputs.size() == 1 && reusable(s->lhs, inputs[0]) &&
                                                 scalar_tiny_in_place(*s, *host_bytes(inputs[0]))) {
      outputs[0] = std::move(inputs[0]);
      return {};
    }
    HostInputs host(inputs.size());
    size_t i = 0;
    op.each_input([&](const TensorIr& t) { host.add(t, inputs[i++]); });
    if (host.error) return std::move(host.error);
    // bf16 matmul runs on the CPU's bf16 dot products where it has them,
    // without the f32 copies below.
    if (auto* mm = std::get_if<MatmulOp>(&op.op)) {
      if (auto native = matmul_bf16(ctx_, *mm, host.view())) {
        if (!*native) return std::move(native->error());
        outputs[0] = std::make_shared<HostBuffer>(std::move(**native));
        return {};
      }
    }
    std::vector<Bytes> widened;
    const auto narrow_to = widen_halves(ctx_, op, host.bytes(), host.consumable(), widened);
    auto result = std::visit([&](auto& o) { return run(o, host.view()); }, op.op);
    if (!result) return std::move(result.error());
    if (narrow_to) {
      int64_t n = 0;
      op.each_output([&](const TensorIr& t) { n = t.numel(); });
      *result = as_dtype(ctx_, *result, DType::f32, *narrow_to, n);
    }
    // Written into a last-use input's block: hand on that input's buffer
    // instead of wrapping the block in a new one (an allocation here and a
    // free when the input's buffer goes, for every op of a chain x = f(x)).
    // The buffer's own bytes, not host.bytes(): widen_halves may have put a
    // widened copy there, which the kernel may then have written into.
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Bytes* in = host_bytes(inputs[k]);
      if (host.consumable()[k] && in != nullptr && in->data() == result->data() && in->size() == result->size() &&
          inputs[k].use_count() == 1) {
        *result = Bytes{};
        outputs[0] = std::move(inputs[k]);
        return {};
      }
    }
    outputs[0] = std::make_shared<HostBuffer>(std::move(*result));
    return {};
  }

  [[nodiscard]] bool fusible(const OperationIr& op) const override { return fusible_elementwise(op); }

  [[nodiscard]] bool fusible_head(const OperationIr& op) const override {
    if (const auto* c = std::get_if<ConvOp>(&op.op)) return conv_fusible_head(*c);
    if (const auto* m = std::get_if<MatmulOp>(&op.op)) return matmul_fusible_head(*m);
    return false;
  }

  DeviceError execute_fused(std::span<OperationIr> chain, std::span<const TensorIr> tensors,
                            std::span<BufferPtr> inputs, BufferPtr& output) override {
    HostInputs host(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) host.add(tensors[i], inputs[i]);
    if (host.error) return std::move(host.error);
    if (std::holds_alternative<ConvOp>(chain.front().op) || std::holds_alternative<MatmulOp>(chain.front().op))
      return execute_headed_chain(chain, tensors, host, output);
    auto result = fused_elementwise(ctx_, chain, tensors, host.view());
    if (!result) return std::move(result.error());
    output = std::make_shared<HostBuffer>(std::move(*result));
    return {};
  }

  // A chain headed by a convolution or a matmul: the add of a same-shape
  // f32 tensor and the relu that follow it (conv, relu; conv, add, relu;
  // linear, relu; linear, add) run in the GEMM's store; any ops after those
  // as a fused element-wise chain over the result, as its input.
  DeviceError execute_headed_chain(std::span<OperationIr> chain, std::span<const TensorIr> tensors, HostInputs& host,
                                   BufferPtr& output) {
    auto& head = chain.front();
    const auto bytes_of = [&](const TensorIr& t) -> const Bytes* {
      for (size_t k = 0; k < tensors.size(); ++k)
        if (tensors[k].id == t.id) return host.view().bytes[k];
      return nullptr;
    };
    std::array<const Bytes*, 3> head_in{};
    std::array<bool, 3> head_consumable{};
    size_t n_in = 0;
    head.each_input([&](const TensorIr& t) { head_in[n_in++] = bytes_of(t); });
    if (std::find(head_in.begin(), head_in.begin() + static_cast<std::ptrdiff_t>(n_in), nullptr) !=
        head_in.begin() + static_cast<std::ptrdiff_t>(n_in))
      return DeviceError(Errc::kernel_failure, "cpu: fused chain: an input of " + head.name() + " is missing");
    TensorIr head_out;
    head.each_output([&](const TensorIr& t) { head_out = t; });
    TensorIr result = head_out;  // the last output the epilogue computes
    size_t used = 1;
    F32GemmEpilogue ep;
    const Bytes* add = nullptr;
    const auto same = [&](const TensorIr& t) { return t.dtype == DType::f32 && t.shape == head_out.shape; };
    // A value the store replaces must not be read after the op that
    // consumes it there: the rest of the chain sees only the store's result.
    const auto read_after = [&](size_t op, TensorId id) {
      bool read = false;
      for (size_t j = op + 1; j < chain.size() && !read; ++j)
        chain[j].each_input([&](const TensorIr& t) { read = read || t.id == id; });
      return read;
    };
    if (used < chain.size())
      if (const auto* b = std::get_if<BinaryOp>(&chain[used].op);
          b != nullptr && b->kind == BinaryKind::add && same(b->lhs) && same(b->rhs) && same(b->out) &&
          (b->lhs.id == result.id) != (b->rhs.id == result.id) && !read_after(used, result.id)) {
        ep.add_first = b->rhs.id == result.id;
        add = bytes_of(ep.add_first ? b->lhs : b->rhs);
        if (add == nullptr) return DeviceError(Errc::kernel_failure, "cpu: fused chain: an addend is missing");
        result = b->out;
        ++used;
      }
    if (used < chain.size())
      if (const auto* u = std::get_if<UnaryOp>(&chain[used].op); u != nullptr && u->kind == UnaryKind::relu &&
                                                                 u->in.id == result.id && same(u->in) && same(u->out) &&
                                                                 !read_after(used, result.id)) {
        ep.relu = true;
        result = u->out;
        ++used;
      }
    const Inputs in{{head_in.data(), n_in}, {head_consumable.data(), n_in}};
    const float* addend = add != nullptr ? add->as<const float>() : nullptr;
    auto y = std::holds_alternative<ConvOp>(head.op) ? conv_fused(ctx_, std::get<ConvOp>(head.op), in, addend, ep)
                                                     : matmul_fused(ctx_, std::get<MatmulOp>(head.op), in, addend, ep);
    if (!y) return std::move(y.error());
    if (used < chain.size()) {
      // The rest reads `result` (for the last time: only the chain sees it;
      // nothing the store consumed, see read_after) and the chain's inputs
      // it names.
      const auto rest = chain.subspan(used);
      std::vector<TensorIr> rest_tensors{result};
      rest_tensors.back().status = TensorStatus::read_write;
      std::vector<const Bytes*> rest_bytes{&*y};
      for (size_t k = 0; k < tensors.size(); ++k) {
        bool named = false;
        for (auto& op : rest) op.each_input([&](const TensorIr& t) { named = named || t.id == tensors[k].id; });
        if (!named) continue;
        rest_tensors.push_back(tensors[k]);
        rest_bytes.push_back(host.view().bytes[k]);
      }
      auto consumable = std::make_unique<bool[]>(rest_bytes.size());  // all false but the result's
      consumable[0] = true;
      auto z = fused_elementwise(ctx_, rest, rest_tensors, Inputs{rest_bytes, {consumable.get(), rest_bytes.size()}});
      if (!z) return std::move(z.error());
      y = std::move(z);
    }
    output = std::make_shared<HostBuffer>(std::move(*y));
    return {};
  }

  void seed(uint64_t s) override {
    ctx_.seed = s;
    ctx_.random_ops = 0;
  }

  [[nodiscard]] Bytes host_block(size_t size) override { return buffers_.allocate(size); }
  [[nodiscard]] MemoryStats memory() const override {
    // Packings first: dropping those of dropped tensors returns their
    // blocks to the pool.
    const uint64_t packed = packed_.bytes();
    return {buffers_.bytes_in_use(), buffers_.bytes_cached() + packed};
  }
  void trim() override {
    packed_.clear();  // before the pool's trim: it returns their source blocks
    buffers_.trim();
  }

 private:
  Expected<Bytes> run(FromDataOp& o, const Inputs&) { return o.data.bytes; }
  Expected<Bytes> run(FillOp& o, const Inputs&) { return fill(ctx_, o); }
  Expected<Bytes> run(RandomOp& o, const Inputs&) { return random(ctx_, o); }
  Expected<Bytes> run(UnaryOp& o, const Inputs& in) { return unary(ctx_, o, in); }
  Expected<Bytes> run(BinaryOp& o, const Inputs& in) { return binary(ctx_, o, in); }
  Expected<Bytes> run(ScalarOp& o, const Inputs& in) { return scalar(ctx_, o, in); }
  Expected<Bytes> run(ReduceOp& o, const Inputs& in) { return reduce(ctx_, o, in); }
  Expected<Bytes> run(SoftmaxOp& o, const Inputs& in) { return softmax(ctx_, o, in); }
  Expected<Bytes> run(MatmulOp& o, const Inputs& in) { return matmul(ctx_, o, in); }
  Expected<Bytes> run(CastOp& o, const Inputs& in) { return cast(ctx_, o, in); }
  Expected<Bytes> run(ViewOp& o, const Inputs& in) { return view(ctx_, o, in); }
  Expected<Bytes> run(SliceAssignOp& o, const Inputs& in) { return slice_assign(ctx_, o, in); }
  Expected<Bytes> run(CatOp& o, const Inputs& in) { return cat(ctx_, o, in); }
  Expected<Bytes> run(PadOp& o, const Inputs& in) { return pad(ctx_, o, in); }
  Expected<Bytes> run(IndexOp& o, const Inputs& in) { return index(ctx_, o, in); }
  Expected<Bytes> run(WhereOp& o, const Inputs& in) { return where(ctx_, o, in); }
  Expected<Bytes> run(ConvOp& o, const Inputs& in) { return conv(ctx_, o, in); }
  Expected<Bytes> run(PoolOp& o, const Inputs& in) { return pool(ctx_, o, in); }
  Expected<Bytes> run(NormOp& o, const Inputs& in) { return norm(ctx_, o, in); }
  Expected<Bytes> run(AttentionOp& o, const Inputs& in) { return attention(ctx_, o, in); }
  Expected<Bytes> run(ScanOp& o, const Inputs& in) { return scan(ctx_, o, in); }
  Expected<Bytes> run(SortOp& o, const Inputs& in) { return sort(ctx_, o, in); }
  Expected<Bytes> run(DropOp&, const Inputs&) {
    return DeviceError(Errc::protocol_error, "cpu: drop is handled by the runner");
  }
  Expected<Bytes> run(SeedOp&, const Inputs&) {
    return DeviceError(Errc::protocol_error, "cpu: seed is handled by the runner");
  }

  ThreadPool pool_;
  BufferPool buffers_;
  // Mutable: memory(), const, drops the packings of dropped tensors.
  mutable PackedWeights packed_;
  Context ctx_;
};

}  // namespace

BackendKind backend_kind() {
  return BackendKind{
      "cpu",
      [] { return 1 << 16; },
      [] { return std::string{}; },
      [](int, const DeviceOptions& options) -> std::unique_ptr<Backend> {
        return std::make_unique<CpuBackend>(options);
      },
  };
}

}  // namespace switchyard::backends::cpu
