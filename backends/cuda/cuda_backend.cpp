// The CUDA backend: host side. Everything here enqueues work on the
// device's streams and returns; the only blocking waits are in
// synchronize() and in the destructor.
//
//   compute stream  kernels, cuBLAS, allocations and frees (stream-ordered pool)
//   copy stream     host <-> device transfers through pinned staging
//
// The two streams are ordered by events: an upload's copy waits for its
// allocation, later compute waits for the upload; a read's copy waits for
// the compute enqueued before it. A read completes through a host function
// on the copy stream, which wakes the runner; poll() then runs the read's
// callback on the runner's thread.

#include "backends/cuda/cuda_backend.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <deque>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <mutex>

#include "backends/cuda/check.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/layout_plan.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard::backends::cuda {

// The kernels take kinds as integers; these keep both enums in step.
static_assert(kern::u_count == static_cast<int>(UnaryKind::isinf) + 1);
static_assert(kern::u_clamp == static_cast<int>(UnaryKind::clamp) && kern::u_gelu == static_cast<int>(UnaryKind::gelu));
static_assert(kern::u_logical_not == static_cast<int>(UnaryKind::logical_not));
static_assert(kern::b_count == static_cast<int>(BinaryKind::bitwise_xor) + 1);
static_assert(kern::b_eq == static_cast<int>(BinaryKind::eq) &&
              kern::b_logical_and == static_cast<int>(BinaryKind::logical_and));
static_assert(kern::b_remainder == static_cast<int>(BinaryKind::remainder));
static_assert(kern::r_count == static_cast<int>(ReduceKind::all) + 1);
static_assert(kern::r_argmax == static_cast<int>(ReduceKind::argmax) &&
              kern::r_var == static_cast<int>(ReduceKind::var));
static_assert(static_cast<int>(RandomKind::normal) == 1 && static_cast<int>(RandomKind::bernoulli) == 2);

caf::error cuda_failure(cudaError_t e, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // non-sticky errors must not resurface at the next launch check
  Errc code = e == cudaErrorMemoryAllocation ? Errc::out_of_memory
              : e == cudaErrorNotSupported   ? Errc::unsupported
                                             : Errc::kernel_failure;
  return make_error(code, std::string("cuda: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + expr +
                              " at " + file + ":" + std::to_string(line));
}

caf::error cublas_failure(cublasStatus_t s, const char* expr, const char* file, int line) {
  Errc code = s == CUBLAS_STATUS_ALLOC_FAILED ? Errc::out_of_memory : Errc::kernel_failure;
  return make_error(code, std::string("cuda: cuBLAS ") + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) +
                              ") in " + expr + " at " + file + ":" + std::to_string(line));
}

Probe probe() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return {count, {}};
  (void)cudaGetLastError();
  if (e == cudaSuccess || e == cudaErrorNoDevice) return {0, "no GPU"};
  if (e == cudaErrorInsufficientDriver) {
    // Same code for "no driver" and "driver too old": tell them apart.
    if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(h);
      return {0, "CUDA driver too old for this build's CUDA runtime"};
    }
    return {0, "no CUDA driver"};
  }
  return {0, std::string("CUDA unavailable: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

namespace {

constexpr size_t align16(size_t n) { return (n + 15) & ~size_t{15}; }

// --- device state ---------------------------------------------------------

/// Per-device state shared by the backend and every buffer it made, so that
/// the last buffer (whoever drops it) can still free its memory.
class DeviceState {
 public:
  explicit DeviceState(int index, uint64_t limit) : index_(index), limit_(limit) {}
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  caf::error init() {
    SY_CUDA_TRY(cudaSetDevice(index_));
    SY_CUDA_TRY(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    SY_CUDA_TRY(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    int sms = 0;
    SY_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index_));
    max_blocks_ = std::max(1, sms) * 8;
    int pools = 0;
    SY_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, index_));
    if (!pools) return make_error(Errc::unsupported, "cuda: device has no stream-ordered memory pools");
    // An own pool (not the device default) so the statistics are ours alone.
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = index_;
    SY_CUDA_TRY(cudaMemPoolCreate(&pool_, &props));
    // Keep freed memory cached (up to the limit, if any) instead of
    // returning it to the driver at every synchronization.
    uint64_t threshold = limit_ ? limit_ : UINT64_MAX;
    SY_CUDA_TRY(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
    SY_CUBLAS_TRY(cublasCreate(&blas_));
    SY_CUBLAS_TRY(cublasSetStream(blas_, compute_));
    return {};
  }

  ~DeviceState() {
    // Teardown is the one place that may wait: every enqueued transfer and
    // host function must finish before the streams and pools go.
    if (cudaSetDevice(index_) != cudaSuccess) return;
    if (copy_) (void)cudaStreamSynchronize(copy_);
    if (compute_) (void)cudaStreamSynchronize(compute_);
    if (blas_) (void)cublasDestroy(blas_);
    if (pool_) (void)cudaMemPoolDestroy(pool_);
    if (copy_) (void)cudaStreamDestroy(copy_);
    if (compute_) (void)cudaStreamDestroy(compute_);
    (void)cudaGetLastError();
  }

  /// Device memory ordered on the compute stream; sizes round up to 16 bytes
  /// (the byte-wide atomics rely on it). Over the limit: out_of_memory.
  /// A failed allocation trims the pool's cache and tries once more.
  caf::expected<void*> allocate(size_t bytes) {
    const size_t size = align16(std::max<size_t>(bytes, 1));
    if (limit_ && in_use_ + size > limit_)
      return make_error(Errc::out_of_memory, "cuda: allocating " + std::to_string(size) + " bytes would exceed the " +
                                                 std::to_string(limit_) + "-byte memory limit (" +
                                                 std::to_string(in_use_.load()) + " bytes in use)");
    void* p = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&p, size, pool_, compute_);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      (void)cudaMemPoolTrimTo(pool_, 0);
      e = cudaMallocFromPoolAsync(&p, size, pool_, compute_);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return make_error(Errc::out_of_memory, "cuda: out of device memory allocating " + std::to_string(size) +
                                                 " bytes (" + std::to_string(in_use_.load()) +
                                                 " bytes in use by this device's tensors)");
    }
    SY_CUDA_TRY(e);
    in_use_ += size;
    return p;
  }

  void release(void* p, size_t bytes) noexcept {
    if (!p) return;
    (void)cudaSetDevice(index_);
    // Stream-ordered: the memory returns to the pool once the compute
    // stream passes this point; readers on the copy stream hold a
    // reference to the buffer until their copy is done.
    if (cudaFreeAsync(p, compute_) != cudaSuccess) (void)cudaGetLastError();
    in_use_ -= align16(std::max<size_t>(bytes, 1));
  }

  [[nodiscard]] MemoryStats memory() const {
    MemoryStats m;
    m.bytes_in_use = in_use_.load();
    uint64_t reserved = 0, used = 0;
    if (pool_ && cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess &&
        cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess)
      m.bytes_cached = reserved > used ? reserved - used : 0;
    else
      (void)cudaGetLastError();
    return m;
  }

  /// Makes `to` wait for everything enqueued on `from` so far.
  caf::error order(cudaStream_t from, cudaStream_t to) {
    cudaEvent_t ev = nullptr;
    SY_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, from);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(to, ev, 0);
    // Destroying a recorded event is fine: the wait keeps its own reference.
    (void)cudaEventDestroy(ev);
    SY_CUDA_TRY(e);
    return {};
  }

  [[nodiscard]] int index() const noexcept { return index_; }
  [[nodiscard]] cudaStream_t compute() const noexcept { return compute_; }
  [[nodiscard]] cudaStream_t copy() const noexcept { return copy_; }
  [[nodiscard]] cublasHandle_t blas() const noexcept { return blas_; }
  [[nodiscard]] cudaMemPool_t pool() const noexcept { return pool_; }
  [[nodiscard]] kern::Launch launch() const noexcept { return kern::Launch{compute_, max_blocks_}; }

 private:
  int index_;
  uint64_t limit_;
  std::atomic<uint64_t> in_use_{0};
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  int max_blocks_ = 1024;
};
using DevicePtr = std::shared_ptr<DeviceState>;

/// One device allocation; freed (stream-ordered) with its last reference.
class Block {
 public:
  Block(DevicePtr dev, void* p, size_t bytes) : dev_(std::move(dev)), ptr_(p), bytes_(bytes) {}
  ~Block() { dev_->release(ptr_, bytes_); }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  [[nodiscard]] void* data() const noexcept { return ptr_; }

 private:
  DevicePtr dev_;
  void* ptr_;
  size_t bytes_;
};
using BlockPtr = std::shared_ptr<Block>;

/// A check a kernel performs on the data (index range, integer division by
/// zero): the kernel writes a status word pair on the device; a read of any
/// tensor computed from it copies the words with the data and fails with
/// this error when the first word is set. Reads never wait on the device
/// for it, and ops downstream of it inherit the check.
struct Check {
  BlockPtr word;  // int64 [flag, value]
  Errc code = Errc::kernel_failure;
  std::string op;
  int64_t extent = 0;
  int64_t axis = 0;

  [[nodiscard]] caf::error error(int64_t value) const {
    if (code == Errc::index_out_of_range)
      return make_error(code, op + ": index " + std::to_string(value) + " is out of range for extent " +
                                  std::to_string(extent) + " of axis " + std::to_string(axis));
    return make_error(code, op + ": integer division by zero");
  }
};
using Checks = std::vector<std::shared_ptr<const Check>>;

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(BlockPtr block, size_t size, Checks checks = {})
      : block_(std::move(block)), size_(size), checks_(std::move(checks)) {}
  [[nodiscard]] size_t size() const noexcept override { return size_; }
  [[nodiscard]] void* data() const noexcept { return block_->data(); }
  [[nodiscard]] const BlockPtr& block() const noexcept { return block_; }
  [[nodiscard]] const Checks& checks() const noexcept { return checks_; }
  void add_checks(const Checks& more) {
    for (const auto& c : more)
      if (std::find(checks_.begin(), checks_.end(), c) == checks_.end()) checks_.push_back(c);
  }

 private:
  BlockPtr block_;
  size_t size_;
  Checks checks_;
};

CudaBuffer* as_cuda(const BufferPtr& b) { return dynamic_cast<CudaBuffer*>(b.get()); }

// --- pinned staging -------------------------------------------------------

/// Page-locked host chunks for transfers, cached by power-of-two size. Only
/// the runner's thread takes and returns chunks. Chunks are freed only in
/// the destructor: cudaFreeHost synchronizes the device, which must never
/// happen on the way of an op. A chunk a failed transfer may still be
/// using is abandoned (never reused) and freed there too.
class PinnedPool {
 public:
  PinnedPool() = default;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool() { release_cached(); }

  caf::expected<std::pair<std::byte*, size_t>> take(size_t bytes) {
    size_t size = 4096;
    while (size < bytes) size <<= 1;
    auto it = free_.find(size);
    if (it != free_.end()) {
      std::byte* p = it->second;
      free_.erase(it);
      cached_ -= size;
      return std::pair{p, size};
    }
    void* p = nullptr;
    SY_CUDA_TRY(cudaHostAlloc(&p, size, cudaHostAllocPortable));
    return std::pair{static_cast<std::byte*>(p), size};
  }

  void give(std::byte* p, size_t size) {
    free_.emplace(size, p);
    cached_ += size;
  }

  void abandon(std::byte* p) { abandoned_.push_back(p); }

  void release_cached() noexcept {
    for (auto& [size, p] : free_) (void)cudaFreeHost(p);
    for (auto* p : abandoned_) (void)cudaFreeHost(p);
    free_.clear();
    abandoned_.clear();
    cached_ = 0;
    (void)cudaGetLastError();
  }

  [[nodiscard]] uint64_t cached() const noexcept { return cached_; }

 private:
  std::multimap<size_t, std::byte*> free_;
  std::vector<std::byte*> abandoned_;
  uint64_t cached_ = 0;
};

/// Completions of host functions on the copy stream. They run in stream
/// order, so a count is enough to know which pending transfers are done.
struct Inbox {
  std::atomic<uint64_t> completed{0};
  std::mutex mutex;
  std::function<void()> wake;

  static void CUDART_CB on_host(void* self) {
    // No CUDA calls allowed here: count, and wake the runner.
    auto* inbox = static_cast<Inbox*>(self);
    inbox->completed.fetch_add(1, std::memory_order_release);
    std::lock_guard lock(inbox->mutex);
    if (inbox->wake) inbox->wake();
  }
};

struct PendingTransfer {
  std::byte* chunk = nullptr;
  size_t chunk_size = 0;
  BufferPtr buffer;  // keeps device memory alive until the copy completes
  TensorIr ir;
  ReadCallback done;  // empty for uploads
  Checks checks;
};

template <class T>
uint64_t bits_of(double v) {
  T x;
  if constexpr (std::is_same_v<T, bool>)
    x = v != 0;
  else
    x = static_cast<T>(v);
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(T));
  return bits;
}

uint64_t bits_for(DType t, double v) {
  return visit_dtype(t, [&](auto tag) { return bits_of<decltype(tag)>(v); });
}

caf::error unsupported(const std::string& what, DType t) {
  return make_error(Errc::unsupported, "cuda: " + what + " is not defined for " + std::string(name_of(t)));
}

// --- the backend --------------------------------------------------------------

class CudaBackend final : public Backend {
 public:
  CudaBackend(int index, const DeviceOptions& options)
      : dev_(std::make_shared<DeviceState>(index, options.memory_limit)), inbox_(std::make_unique<Inbox>()) {
    init_error_ = dev_->init();
  }

  ~CudaBackend() override {
    // Wait for the copy stream so no host function touches the inbox after
    // it is gone; the DeviceState (shared with surviving buffers) goes last.
    if (cudaSetDevice(dev_->index()) == cudaSuccess && dev_->copy()) (void)cudaStreamSynchronize(dev_->copy());
    (void)cudaGetLastError();
    // Unfinished reads are dropped, not called back: the runner is going
    // away with us (its promises then report a broken promise).
    for (auto& p : pending_) pinned_.give(p.chunk, p.chunk_size);
    pending_.clear();
  }

  [[nodiscard]] std::string_view kind() const noexcept override { return "cuda"; }
  [[nodiscard]] bool supports(DType) const noexcept override { return true; }

  caf::expected<BufferPtr> from_data(const TensorIr& t, TensorData data) override {
    if (init_error_) return init_error_;
    SY_CUDA_TRY(cudaSetDevice(dev_->index()));
    auto out = upload(t, data.bytes);
    if (!out) return std::move(out.error());
    return BufferPtr{std::move(*out)};
  }

  void to_data(const TensorIr& t, const BufferPtr& buffer, ReadCallback done) override {
    if (auto err = start_read(t, buffer, done)) done(std::move(err));
  }

  caf::error execute(OperationIr& op, std::span<BufferPtr> inputs, std::span<BufferPtr> outputs) override {
    if (init_error_) return init_error_;
    SY_CUDA_TRY(cudaSetDevice(dev_->index()));
    for (const auto& b : inputs)
      if (!as_cuda(b)) return make_error(Errc::invalid_tensor, "cuda: input buffer of another backend");
    auto result = std::visit([&](auto& o) { return run(o, inputs); }, op.op);
    if (!result) return std::move(result.error());
    // Ops downstream of a data check inherit it, so their reads fail too.
    for (const auto& b : inputs) (*result)->add_checks(as_cuda(b)->checks());
    outputs[0] = std::move(*result);
    return {};
  }

  void seed(uint64_t s) override {
    seed_ = s;
    random_ops_ = 0;
  }

  void set_waker(std::function<void()> wake) override {
    std::lock_guard lock(inbox_->mutex);
    inbox_->wake = std::move(wake);
  }

  void poll() override {
    const uint64_t completed = inbox_->completed.load(std::memory_order_acquire);
    while (consumed_ < completed && !pending_.empty()) {
      PendingTransfer p = std::move(pending_.front());
      pending_.pop_front();
      ++consumed_;
      finish(p);
    }
  }

  caf::error synchronize() override {
    if (init_error_) return init_error_;
    SY_CUDA_TRY(cudaSetDevice(dev_->index()));
    SY_CUDA_TRY(cudaStreamSynchronize(dev_->copy()));
    SY_CUDA_TRY(cudaStreamSynchronize(dev_->compute()));
    poll();
    return {};
  }

  [[nodiscard]] MemoryStats memory() const override {
    if (init_error_) return {};
    (void)cudaSetDevice(dev_->index());
    return dev_->memory();
  }

 private:
  using Result = caf::expected<std::shared_ptr<CudaBuffer>>;

  // --- transfers -------------------------------------------------------------

  Result upload(const TensorIr& t, const Bytes& bytes) {
    auto block = new_block(bytes.size());
    if (!block) return std::move(block.error());
    auto out = std::make_shared<CudaBuffer>(std::move(*block), t.bytes());
    if (bytes.size() == 0) return out;
    auto chunk = pinned_.take(bytes.size());
    if (!chunk) return std::move(chunk.error());
    std::memcpy(chunk->first, bytes.data(), bytes.size());
    if (auto err = dev_->order(dev_->compute(), dev_->copy())) {  // the allocation is stream-ordered
      pinned_.give(chunk->first, chunk->second);
      return err;
    }
    cudaError_t e = cudaMemcpyAsync(out->data(), chunk->first, bytes.size(), cudaMemcpyHostToDevice, dev_->copy());
    if (e != cudaSuccess) {
      pinned_.give(chunk->first, chunk->second);
      SY_CUDA_TRY(e);
    }
    // From here the chunk belongs to the copy until its host function ran;
    // on an error it is abandoned rather than risk a copy still reading it.
    e = cudaLaunchHostFunc(dev_->copy(), &Inbox::on_host, inbox_.get());
    if (e != cudaSuccess) {
      pinned_.abandon(chunk->first);
      SY_CUDA_TRY(e);
    }
    pending_.push_back(PendingTransfer{chunk->first, chunk->second, out, t, {}, {}});
    if (auto err = dev_->order(dev_->copy(), dev_->compute())) return err;
    return out;
  }

  caf::error start_read(const TensorIr& t, const BufferPtr& buffer, ReadCallback& done) {
    if (init_error_) return init_error_;
    auto* b = as_cuda(buffer);
    if (!b) return make_error(Errc::invalid_tensor, "cuda: buffer of another backend");
    SY_CUDA_TRY(cudaSetDevice(dev_->index()));
    const size_t bytes = t.bytes();
    const size_t data_part = align16(bytes);
    auto chunk = pinned_.take(data_part + 16 * b->checks().size());
    if (!chunk) return std::move(chunk.error());
    if (auto err = dev_->order(dev_->compute(), dev_->copy())) {
      pinned_.give(chunk->first, chunk->second);
      return err;
    }
    cudaError_t e =
        bytes ? cudaMemcpyAsync(chunk->first, b->data(), bytes, cudaMemcpyDeviceToHost, dev_->copy()) : cudaSuccess;
    for (size_t i = 0; i < b->checks().size() && e == cudaSuccess; ++i)
      e = cudaMemcpyAsync(chunk->first + data_part + 16 * i, b->checks()[i]->word->data(), 16, cudaMemcpyDeviceToHost,
                          dev_->copy());
    if (e == cudaSuccess) e = cudaLaunchHostFunc(dev_->copy(), &Inbox::on_host, inbox_.get());
    if (e != cudaSuccess) {
      pinned_.abandon(chunk->first);  // a copy may still be writing it
      SY_CUDA_TRY(e);
    }
    pending_.push_back(PendingTransfer{chunk->first, chunk->second, buffer, t, std::move(done), b->checks()});
    return {};
  }

  // Completes a transfer whose copy is done: an upload returns its staging
  // chunk; a read checks the data-check words, copies the data out of the
  // staging chunk and then calls back (once, outside the try).
  void finish(PendingTransfer& p) {
    if (!p.done) {
      pinned_.give(p.chunk, p.chunk_size);
      return;
    }
    caf::expected<TensorData> result = make_error(Errc::kernel_failure, "cuda: read: no result");
    try {
      result = read_result(p);
    } catch (const std::exception& ex) {  // bad_alloc for the host copy: the runner must live on
      result = make_error(Errc::out_of_memory, std::string("cuda: read: ") + ex.what());
    }
    pinned_.give(p.chunk, p.chunk_size);
    p.buffer.reset();
    p.done(std::move(result));
  }

  caf::expected<TensorData> read_result(const PendingTransfer& p) const {
    const size_t bytes = p.ir.bytes();
    const size_t data_part = align16(bytes);
    for (size_t i = 0; i < p.checks.size(); ++i) {
      int64_t word[2];
      std::memcpy(word, p.chunk + data_part + 16 * i, sizeof word);
      if (word[0] != 0) return p.checks[i]->error(word[1]);
    }
    return TensorData(p.ir.shape, p.ir.dtype, Bytes::copy_of(p.chunk, bytes));
  }

  // --- helpers -----------------------------------------------------------------

  caf::expected<BlockPtr> new_block(size_t bytes) {
    auto p = dev_->allocate(bytes);
    if (!p) return std::move(p.error());
    return std::make_shared<Block>(dev_, *p, bytes);
  }

  Result new_buffer(const TensorIr& t) {
    auto block = new_block(t.bytes());
    if (!block) return std::move(block.error());
    return std::make_shared<CudaBuffer>(std::move(*block), t.bytes());
  }

  // Whether an input may be overwritten: last use, and nobody else (a
  // pending read, a view sharing the block) holds it.
  static bool consumable(const TensorIr& ir, const BufferPtr& b) {
    auto* c = as_cuda(b);
    return ir.status == TensorStatus::read_write && b.use_count() == 1 && c && c->block().use_count() == 1;
  }

  /// The output buffer, reusing a consumable input of the same shape and dtype.
  Result output(const TensorIr& out, std::initializer_list<std::pair<const TensorIr*, const BufferPtr*>> candidates) {
    for (const auto& [ir, b] : candidates)
      if (ir->shape == out.shape && ir->dtype == out.dtype && consumable(*ir, *b))
        return std::make_shared<CudaBuffer>(as_cuda(*b)->block(), out.bytes());
    return new_buffer(out);
  }

  /// Device pointer to `n` elements of `b` as dtype `to`; converts into
  /// `scratch` when the dtypes differ.
  caf::expected<const void*> as_dtype(const BufferPtr& b, DType from, DType to, int64_t n, BlockPtr& scratch) {
    if (from == to) return static_cast<const void*>(as_cuda(b)->data());
    auto block = new_block(static_cast<size_t>(n) * size_of(to));
    if (!block) return std::move(block.error());
    scratch = std::move(*block);
    SY_CUDA_TRY(kern::cast(dev_->launch(), as_cuda(b)->data(), from, scratch->data(), to, n));
    return static_cast<const void*>(scratch->data());
  }

  /// A zeroed status word pair for a data check.
  caf::expected<std::shared_ptr<Check>> new_check(Errc code, std::string op, int64_t extent, int64_t axis) {
    auto word = new_block(16);
    if (!word) return std::move(word.error());
    SY_CUDA_TRY(cudaMemsetAsync((*word)->data(), 0, 16, dev_->compute()));
    auto c = std::make_shared<Check>();
    c->word = std::move(*word);
    c->code = code;
    c->op = std::move(op);
    c->extent = extent;
    c->axis = axis;
    return c;
  }

  static void* ptr(const BufferPtr& b) { return as_cuda(b)->data(); }
  static int64_t* status_of(const std::shared_ptr<Check>& c) { return static_cast<int64_t*>(c->word->data()); }

  /// Turns a kernel entry's status into an error; NotSupported names the op.
  static caf::error kernel_status(cudaError_t e, const std::string& what, DType t, const char* expr, const char* file,
                                  int line) {
    if (e == cudaSuccess) return {};
    if (e == cudaErrorNotSupported) {
      (void)cudaGetLastError();
      return unsupported(what, t);
    }
    return cuda_failure(e, expr, file, line);
  }
#define SY_KERNEL_TRY(expr, what, dtype)                                                                  \
  do {                                                                                                    \
    if (auto sy_err_ = kernel_status((expr), (what), (dtype), #expr, __FILE__, __LINE__)) return sy_err_; \
  } while (0)

  // --- ops ------------------------------------------------------------------------

  Result run(FromDataOp& o, std::span<BufferPtr>) { return upload(o.out, o.data.bytes); }

  Result run(FillOp& o, std::span<BufferPtr>) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    const int64_t n = o.out.numel();
    const size_t w = size_of(o.out.dtype);
    const auto l = dev_->launch();
    switch (o.kind) {
      case FillKind::full:
        SY_CUDA_TRY(kern::fill_bits(l, w, (*out)->data(), bits_for(o.out.dtype, o.value), n));
        break;
      case FillKind::arange:
        SY_CUDA_TRY(kern::arange(l, o.out.dtype, (*out)->data(), n, o.value, o.step));
        break;
      case FillKind::eye: {
        const auto& d = o.out.shape.dims;
        const int64_t rows = d[d.size() - 2], cols = d[d.size() - 1];
        const int64_t mats = rows * cols == 0 ? 0 : n / (rows * cols);
        SY_CUDA_TRY(cudaMemsetAsync((*out)->data(), 0, o.out.bytes(), l.stream));
        SY_CUDA_TRY(kern::eye_diagonal(l, w, (*out)->data(), bits_for(o.out.dtype, 1.0), mats, rows, cols));
        break;
      }
    }
    return out;
  }

  Result run(RandomOp& o, std::span<BufferPtr>) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    const uint64_t index = random_ops_++;
    SY_CUDA_TRY(kern::random(dev_->launch(), o.out.dtype, (*out)->data(), o.out.numel(), static_cast<int>(o.kind),
                             seed_, index, o.a, o.b));
    return out;
  }

  Result run(UnaryOp& o, std::span<BufferPtr> in) {
    const bool predicate = o.kind == UnaryKind::logical_not || o.kind == UnaryKind::isnan || o.kind == UnaryKind::isinf;
    const DType compute = predicate ? o.in.dtype : o.out.dtype;
    BlockPtr scratch;
    auto src = as_dtype(in[0], o.in.dtype, compute, o.in.numel(), scratch);
    if (!src) return std::move(src.error());
    auto out = (!predicate && compute == o.in.dtype) ? output(o.out, {{&o.in, &in[0]}}) : new_buffer(o.out);
    if (!out) return out;
    SY_KERNEL_TRY(
        kern::unary(dev_->launch(), static_cast<int>(o.kind), compute, *src, (*out)->data(), o.out.numel(), o.a, o.b),
        to_string(o.kind), compute);
    return out;
  }

  Result run(BinaryOp& o, std::span<BufferPtr> in) {
    const DType compute = binary_compute_dtype(o);
    BlockPtr sa, sb;
    auto a = as_dtype(in[0], o.lhs.dtype, compute, o.lhs.numel(), sa);
    if (!a) return std::move(a.error());
    auto b = as_dtype(in[1], o.rhs.dtype, compute, o.rhs.numel(), sb);
    if (!b) return std::move(b.error());
    std::shared_ptr<Check> check;
    if (o.kind == BinaryKind::remainder && !is_floating(compute)) {
      auto c = new_check(Errc::kernel_failure, "remainder", 0, 0);
      if (!c) return std::move(c.error());
      check = std::move(*c);
    }
    auto out = compute == o.out.dtype ? output(o.out, {{&o.lhs, &in[0]}, {&o.rhs, &in[1]}}) : new_buffer(o.out);
    if (!out) return out;
    auto layout = make_layout<2>(
        o.out.shape.dims, {broadcast_strides(o.lhs.shape, o.out.shape), broadcast_strides(o.rhs.shape, o.out.shape)});
    SY_KERNEL_TRY(kern::binary(dev_->launch(), static_cast<int>(o.kind), compute, *a, *b, 0, 0, (*out)->data(), layout,
                               o.out.numel(), check ? status_of(check) : nullptr),
                  to_string(o.kind), compute);
    if (check) (*out)->add_checks({check});
    return out;
  }

  Result run(ScalarOp& o, std::span<BufferPtr> in) {
    const DType compute = scalar_compute_dtype(o);
    // The scalar converted to the compute dtype here, exactly (a double
    // could not carry an i64 beyond 2^53).
    uint64_t scalar_bits = 0;
    bool scalar_zero = false;
    visit_dtype(compute, [&](auto tag) {
      using T = decltype(tag);
      const T v = o.scalar.as<T>();
      scalar_zero = v == T(0);
      std::memcpy(&scalar_bits, &v, sizeof(T));
    });
    const bool int_remainder = o.kind == BinaryKind::remainder && !is_floating(compute);
    if (int_remainder && !o.scalar_first && scalar_zero)
      return make_error(Errc::kernel_failure, "remainder: integer division by zero");
    BlockPtr sa;
    auto a = as_dtype(in[0], o.lhs.dtype, compute, o.lhs.numel(), sa);
    if (!a) return std::move(a.error());
    std::shared_ptr<Check> check;
    if (int_remainder && o.scalar_first) {
      auto c = new_check(Errc::kernel_failure, "remainder", 0, 0);
      if (!c) return std::move(c.error());
      check = std::move(*c);
    }
    auto out = compute == o.out.dtype ? output(o.out, {{&o.lhs, &in[0]}}) : new_buffer(o.out);
    if (!out) return out;
    const int64_t n = o.out.numel();
    auto layout = make_layout<2>({n}, {std::vector<int64_t>{1}, std::vector<int64_t>{1}});
    SY_KERNEL_TRY(kern::binary_scalar(dev_->launch(), static_cast<int>(o.kind), compute, *a, &scalar_bits,
                                      o.scalar_first, (*out)->data(), layout, n, check ? status_of(check) : nullptr),
                  to_string(o.kind), compute);
    if (check) (*out)->add_checks({check});
    return out;
  }

  Result run(CastOp& o, std::span<BufferPtr> in) {
    if (o.in.dtype == o.out.dtype) return std::make_shared<CudaBuffer>(as_cuda(in[0])->block(), o.out.bytes());
    auto out = new_buffer(o.out);
    if (!out) return out;
    SY_CUDA_TRY(kern::cast(dev_->launch(), ptr(in[0]), o.in.dtype, (*out)->data(), o.out.dtype, o.in.numel()));
    return out;
  }

  Result run(WhereOp& o, std::span<BufferPtr> in) {
    BlockPtr sa, sb;
    auto a = as_dtype(in[1], o.lhs.dtype, o.out.dtype, o.lhs.numel(), sa);
    if (!a) return std::move(a.error());
    auto b = as_dtype(in[2], o.rhs.dtype, o.out.dtype, o.rhs.numel(), sb);
    if (!b) return std::move(b.error());
    auto out = new_buffer(o.out);
    if (!out) return out;
    auto layout = make_layout<3>(
        o.out.shape.dims, {broadcast_strides(o.cond.shape, o.out.shape), broadcast_strides(o.lhs.shape, o.out.shape),
                           broadcast_strides(o.rhs.shape, o.out.shape)});
    SY_CUDA_TRY(kern::where(dev_->launch(), size_of(o.out.dtype), static_cast<const uint8_t*>(ptr(in[0])), *a, *b,
                            (*out)->data(), layout, o.out.numel()));
    return out;
  }

  Result run(ReduceOp& o, std::span<BufferPtr> in) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    const auto strides = o.in.shape.strides();
    std::vector<int64_t> kept_dims, kept_strides, red_dims, red_strides;
    int64_t count = 1;
    for (size_t d = 0; d < o.in.shape.rank(); ++d) {
      const bool r = std::binary_search(o.axes.begin(), o.axes.end(), static_cast<int64_t>(d));
      (r ? red_dims : kept_dims).push_back(o.in.shape.dims[d]);
      (r ? red_strides : kept_strides).push_back(strides[d]);
      if (r) count *= o.in.shape.dims[d];
    }
    auto kept = make_layout<1>(kept_dims, {kept_strides});
    auto red = make_layout<1>(red_dims, {red_strides});
    SY_KERNEL_TRY(kern::reduce(dev_->launch(), static_cast<int>(o.kind), o.in.dtype, o.out.dtype, ptr(in[0]),
                               (*out)->data(), kept, o.out.numel(), red, count, o.correction),
                  to_string(o.kind), o.in.dtype);
    return out;
  }

  Result run(SoftmaxOp& o, std::span<BufferPtr> in) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    const auto& d = o.in.shape.dims;
    int64_t outer = 1, len = d.empty() ? 1 : d[o.axis], inner = 1;
    for (int64_t i = 0; i < o.axis && i < static_cast<int64_t>(d.size()); ++i) outer *= d[i];
    for (size_t i = o.axis + 1; i < d.size(); ++i) inner *= d[i];
    SY_KERNEL_TRY(kern::softmax(dev_->launch(), o.in.dtype, ptr(in[0]), (*out)->data(), outer, len, inner, o.log),
                  "softmax", o.in.dtype);
    return out;
  }

  Result run(MatmulOp& o, std::span<BufferPtr> in) {
    if (o.out.dtype == DType::boolean) return unsupported("matmul", o.out.dtype);
    auto out = new_buffer(o.out);
    if (!out) return out;
    const auto& a = o.lhs.shape.dims;
    const auto& b = o.rhs.shape.dims;
    const auto& od = o.out.shape.dims;
    const int64_t m = od[od.size() - 2], n = od[od.size() - 1];
    const int64_t k = o.transpose_lhs ? a[a.size() - 2] : a[a.size() - 1];
    Shape batch{std::vector<int64_t>(od.begin(), od.end() - 2)};
    Shape ba{std::vector<int64_t>(a.begin(), a.end() - 2)};
    Shape bb{std::vector<int64_t>(b.begin(), b.end() - 2)};
    const int64_t batches = batch.numel();
    // Batch offsets in matrices (broadcast axes have stride 0).
    auto layout = make_layout<2>(batch.dims, {broadcast_strides(ba, batch), broadcast_strides(bb, batch)});
    const auto l = dev_->launch();
    void* c = (*out)->data();
    if (m * n * batches == 0) {
      // empty result: nothing to compute
    } else if (k == 0) {
      SY_CUDA_TRY(cudaMemsetAsync(c, 0, o.out.bytes(), l.stream));
    } else if (is_floating(o.out.dtype)) {
      if (auto err = gemm(o, ptr(in[0]), ptr(in[1]), c, m, n, k, layout, batches)) return err;
    } else {
      SY_KERNEL_TRY(kern::int_matmul(l, o.out.dtype, ptr(in[0]), ptr(in[1]), c, o.transpose_lhs, o.transpose_rhs, m, n,
                                     k, layout, batches),
                    "matmul", o.out.dtype);
    }
    if (o.has_bias() && o.out.numel() > 0) {
      // In place: out's own offsets are the flat index, so no element is
      // read after another thread wrote it.
      auto bl = make_layout<2>(od, {o.out.shape.strides(), broadcast_strides(o.bias.shape, o.out.shape)});
      SY_KERNEL_TRY(kern::binary(l, kern::b_add, o.out.dtype, c, ptr(in[2]), 0, 0, c, bl, o.out.numel(), nullptr),
                    "linear", o.out.dtype);
    }
    return out;
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so
  // cuBLAS gets B first with the row-major leading dimensions.
  caf::error gemm(const MatmulOp& o, const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k,
                  const kern::Layout<2>& layout, int64_t batches) {
    constexpr int64_t imax = INT_MAX;
    if (m > imax || n > imax || k > imax || batches > imax)
      return make_error(Errc::unsupported, "cuda: matmul extents beyond 2^31 are not supported by this backend");
    const cublasOperation_t op_a = o.transpose_lhs ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = o.transpose_rhs ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = static_cast<int>(o.transpose_lhs ? m : k);
    const int ldb = static_cast<int>(o.transpose_rhs ? k : n);
    const int M = static_cast<int>(n), N = static_cast<int>(m), K = static_cast<int>(k);
    const int64_t a_mat = m * k, b_mat = k * n, c_mat = m * n;
    const bool f64 = o.out.dtype == DType::f64;
    cublasHandle_t h = dev_->blas();
    // Regular batches (no batch axes, or one merged axis): strided batched.
    if (layout.rank <= 1) {
      const int64_t sa = layout.rank ? layout.strides[0][0] * a_mat : 0;
      const int64_t sb = layout.rank ? layout.strides[1][0] * b_mat : 0;
      const int count = static_cast<int>(batches);
      if (f64) {
        const double one = 1, zero = 0;
        SY_CUBLAS_TRY(cublasDgemmStridedBatched(h, op_b, op_a, M, N, K, &one, static_cast<const double*>(b), ldb, sb,
                                                static_cast<const double*>(a), lda, sa, &zero, static_cast<double*>(c),
                                                M, c_mat, count));
      } else {
        const float one = 1, zero = 0;
        SY_CUBLAS_TRY(cublasSgemmStridedBatched(h, op_b, op_a, M, N, K, &one, static_cast<const float*>(b), ldb, sb,
                                                static_cast<const float*>(a), lda, sa, &zero, static_cast<float*>(c), M,
                                                c_mat, count));
      }
      return {};
    }
    // Irregular broadcasting: pointer arrays, built on the device.
    auto ptrs = new_block(3 * static_cast<size_t>(batches) * sizeof(void*));
    if (!ptrs) return std::move(ptrs.error());
    void** p = static_cast<void**>((*ptrs)->data());
    SY_CUDA_TRY(
        kern::batch_pointers(dev_->launch(), size_of(o.out.dtype), a, b, c, a_mat, b_mat, c_mat, layout, batches, p));
    void** pa = p;
    void** pb = p + batches;
    void** pc = p + 2 * batches;
    const int count = static_cast<int>(batches);
    if (f64) {
      const double one = 1, zero = 0;
      SY_CUBLAS_TRY(cublasDgemmBatched(h, op_b, op_a, M, N, K, &one, reinterpret_cast<const double* const*>(pb), ldb,
                                       reinterpret_cast<const double* const*>(pa), lda, &zero,
                                       reinterpret_cast<double* const*>(pc), M, count));
    } else {
      const float one = 1, zero = 0;
      SY_CUBLAS_TRY(cublasSgemmBatched(h, op_b, op_a, M, N, K, &one, reinterpret_cast<const float* const*>(pb), ldb,
                                       reinterpret_cast<const float* const*>(pa), lda, &zero,
                                       reinterpret_cast<float* const*>(pc), M, count));
    }
    return {};  // the pointer block is freed stream-ordered, after the GEMM
  }

  Result run(ViewOp& o, std::span<BufferPtr> in) {
    if (o.offset == 0 && o.strides == o.out.shape.strides() && o.out.numel() == o.in.numel())
      return std::make_shared<CudaBuffer>(as_cuda(in[0])->block(), o.out.bytes());  // a reshape: share
    auto out = new_buffer(o.out);
    if (!out) return out;
    auto layout = make_layout<2>(o.out.shape.dims, {o.strides, o.out.shape.strides()});
    SY_CUDA_TRY(kern::copy_strided(dev_->launch(), size_of(o.out.dtype), ptr(in[0]), o.offset, (*out)->data(), 0,
                                   layout, o.out.numel()));
    return out;
  }

  Result run(SliceAssignOp& o, std::span<BufferPtr> in) {
    Result out = consumable(o.base, in[0])
                     ? Result(std::make_shared<CudaBuffer>(as_cuda(in[0])->block(), o.out.bytes()))
                     : new_buffer(o.out);
    if (!out) return out;
    if ((*out)->data() != ptr(in[0]) && o.out.bytes() > 0)
      SY_CUDA_TRY(
          cudaMemcpyAsync((*out)->data(), ptr(in[0]), o.out.bytes(), cudaMemcpyDeviceToDevice, dev_->compute()));
    auto layout = make_layout<2>(o.value.shape.dims, {o.value.shape.strides(), o.strides});
    SY_CUDA_TRY(kern::copy_strided(dev_->launch(), size_of(o.out.dtype), ptr(in[1]), 0, (*out)->data(), o.offset,
                                   layout, o.value.numel()));
    return out;
  }

  Result run(CatOp& o, std::span<BufferPtr> in) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    const auto& od = o.out.shape.dims;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < o.axis; ++i) outer *= od[i];
    for (size_t i = o.axis + 1; i < od.size(); ++i) inner *= od[i];
    const int64_t out_row = od[o.axis] * inner;
    int64_t col = 0;
    for (size_t t = 0; t < o.inputs.size(); ++t) {
      const int64_t row = o.inputs[t].shape.dims[o.axis] * inner;
      auto layout = make_layout<2>({outer, row}, {std::vector<int64_t>{row, 1}, std::vector<int64_t>{out_row, 1}});
      SY_CUDA_TRY(kern::copy_strided(dev_->launch(), size_of(o.out.dtype), ptr(in[t]), 0, (*out)->data(), col, layout,
                                     outer * row));
      col += row;
    }
    return out;
  }

  Result run(PadOp& o, std::span<BufferPtr> in) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    const size_t w = size_of(o.out.dtype);
    SY_CUDA_TRY(kern::fill_bits(dev_->launch(), w, (*out)->data(), bits_for(o.out.dtype, o.value), o.out.numel()));
    const auto out_strides = o.out.shape.strides();
    int64_t offset = 0;
    for (size_t d = 0; d < o.before.size(); ++d) offset += o.before[d] * out_strides[d];
    auto layout = make_layout<2>(o.in.shape.dims, {o.in.shape.strides(), out_strides});
    SY_CUDA_TRY(kern::copy_strided(dev_->launch(), w, ptr(in[0]), 0, (*out)->data(), offset, layout, o.in.numel()));
    return out;
  }

  Result run(IndexOp& o, std::span<BufferPtr> in) {
    static constexpr const char* names[] = {"gather", "scatter_add", "index_select"};
    const auto& ind = o.in.shape.dims;
    const int64_t axis_len = ind.empty() ? 1 : ind[o.axis];
    auto check = new_check(Errc::index_out_of_range, names[static_cast<int>(o.kind)], axis_len, o.axis);
    if (!check) return std::move(check.error());
    auto out = new_buffer(o.out);
    if (!out) return out;
    const size_t w = size_of(o.in.dtype);
    const auto l = dev_->launch();
    int64_t* status = status_of(*check);
    switch (o.kind) {
      case IndexKind::index_select: {
        int64_t outer = 1, inner = 1;
        for (int64_t i = 0; i < o.axis && i < static_cast<int64_t>(ind.size()); ++i) outer *= ind[i];
        for (size_t i = o.axis + 1; i < ind.size(); ++i) inner *= ind[i];
        // A 0-D input keeps its shape whatever the index length.
        const int64_t count = ind.empty() ? std::min(o.index.numel(), o.out.numel()) : o.index.numel();
        SY_CUDA_TRY(kern::index_select(l, w, o.index.dtype, ptr(in[0]), ptr(in[1]), (*out)->data(), outer, axis_len,
                                       count, inner, status));
        break;
      }
      case IndexKind::gather: {
        auto strides = o.in.shape.strides();
        const int64_t axis_stride = strides.empty() ? 0 : strides[o.axis];
        if (!strides.empty()) strides[o.axis] = 0;
        auto layout = make_layout<1>(o.index.shape.dims, {strides});
        SY_CUDA_TRY(kern::gather(l, w, o.index.dtype, ptr(in[0]), ptr(in[1]), (*out)->data(), layout, axis_stride,
                                 axis_len, o.index.numel(), status));
        break;
      }
      case IndexKind::scatter_add: {
        if (o.out.bytes() > 0)
          SY_CUDA_TRY(cudaMemcpyAsync((*out)->data(), ptr(in[0]), o.out.bytes(), cudaMemcpyDeviceToDevice, l.stream));
        auto strides = o.out.shape.strides();
        const int64_t axis_stride = strides.empty() ? 0 : strides[o.axis];
        if (!strides.empty()) strides[o.axis] = 0;
        auto layout = make_layout<2>(o.index.shape.dims, {strides, o.src.shape.strides()});
        SY_CUDA_TRY(kern::scatter_add(l, o.in.dtype, o.index.dtype, ptr(in[2]), ptr(in[1]), (*out)->data(), layout,
                                      axis_stride, axis_len, o.index.numel(), status));
        break;
      }
    }
    (*out)->add_checks({*check});
    return out;
  }

  Result run(DropOp&, std::span<BufferPtr>) {
    return make_error(Errc::protocol_error, "cuda: drop is handled by the runner");
  }
  Result run(SeedOp&, std::span<BufferPtr>) {
    return make_error(Errc::protocol_error, "cuda: seed is handled by the runner");
  }
#undef SY_KERNEL_TRY

  DevicePtr dev_;
  caf::error init_error_;
  PinnedPool pinned_;
  std::unique_ptr<Inbox> inbox_;
  std::deque<PendingTransfer> pending_;  // in copy-stream order
  uint64_t consumed_ = 0;
  uint64_t seed_ = 0;
  uint64_t random_ops_ = 0;
};

}  // namespace

BackendKind backend_kind() {
  return BackendKind{
      "cuda",
      [] { return probe().count; },
      [] { return probe().reason; },
      [](int index, const DeviceOptions& options) -> std::unique_ptr<Backend> {
        return std::make_unique<CudaBackend>(index, options);
      },
  };
}

}  // namespace switchyard::backends::cuda
