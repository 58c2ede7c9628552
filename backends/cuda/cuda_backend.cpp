// SPDX-License-Identifier: Apache-2.0
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
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "backends/common/conv_geometry.hpp"
#include "backends/common/number_conversion.hpp"
#include "backends/cuda/check.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/layout_plan.hpp"
#include "switchyard/messages/dtype_support.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard::backends::cuda {

// The kernels take kinds as integers: the unary and binary ones come from
// the op table itself; the reduce kinds are kept in step here.
static_assert(kern::u_count == static_cast<int>(unary_kind_count));
static_assert(kern::b_count == static_cast<int>(binary_kind_count));
static_assert(kern::r_count == static_cast<int>(ReduceKind::all) + 1);
static_assert(kern::r_argmax == static_cast<int>(ReduceKind::argmax) &&
              kern::r_var == static_cast<int>(ReduceKind::var));
static_assert(static_cast<int>(RandomKind::normal) == 1 && static_cast<int>(RandomKind::bernoulli) == 2);

DeviceError cuda_failure(cudaError_t e, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // non-sticky errors must not resurface at the next launch check
  Errc code = e == cudaErrorMemoryAllocation ? Errc::out_of_memory
              : e == cudaErrorNotSupported   ? Errc::unsupported
                                             : Errc::kernel_failure;
  return DeviceError(code, std::string("cuda: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + expr +
                               " at " + file + ":" + std::to_string(line));
}

DeviceError cublas_failure(cublasStatus_t s, const char* expr, const char* file, int line) {
  Errc code = s == CUBLAS_STATUS_ALLOC_FAILED ? Errc::out_of_memory : Errc::kernel_failure;
  return DeviceError(code, std::string("cuda: cuBLAS ") + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) +
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

/// Restores the calling thread's current CUDA device when it goes.
class CurrentDeviceGuard {
 public:
  CurrentDeviceGuard() {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
  }
  ~CurrentDeviceGuard() {
    if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// Whether an error from a stream query means the context is broken for good
/// (an illegal address, a trap, ...): such errors are returned by every
/// later call, so a second query returning the same error confirms it.
bool is_sticky(cudaStream_t stream, cudaError_t first) {
  if (first == cudaSuccess || first == cudaErrorNotReady) return false;
  return cudaStreamQuery(stream) == first;
}

/// Per-device state shared by the backend and every buffer it made, so that
/// the last buffer (whoever drops it) can still free its memory.
class DeviceState {
 public:
  DeviceState(int index, uint64_t limit, bool allow_tf32) : index_(index), limit_(limit), allow_tf32_(allow_tf32) {}
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  DeviceError init() {
    // The constructing thread's current device is left as it was: a runtime
    // that starts cuda:0..N must not leave its caller on the last GPU.
    CurrentDeviceGuard keep_current;
    SY_CUDA_TRY(cudaSetDevice(index_));
    SY_CUDA_TRY(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    SY_CUDA_TRY(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    int sms = 0;
    SY_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index_));
    max_blocks_ = std::max(1, sms) * 8;
    int pools = 0;
    SY_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, index_));
    if (!pools) return DeviceError(Errc::unsupported, "cuda: device has no stream-ordered memory pools");
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
    // cuBLAS's default math keeps f32 GEMMs in f32; TF32 only when asked.
    // f16/bf16 GEMMs run on tensor cores with f32 accumulation, and never
    // with the reduced-precision (16-bit) split-K reductions cuBLAS may
    // otherwise pick: their sums stay f32 up to the one final rounding.
    const auto math = static_cast<cublasMath_t>((allow_tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                                                CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    SY_CUBLAS_TRY(cublasSetMathMode(blas_, math));
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
  Expected<void*> allocate(size_t bytes) { return allocate_on(bytes, compute_); }

  /// Same, ordered on `stream`. Uploads allocate on the copy stream, so they
  /// need not wait for the compute queued before them; the pool orders any
  /// reuse of memory freed on the compute stream by itself (its internal
  /// dependencies), and the free of such a block happens on the compute
  /// stream after it waited for the upload.
  Expected<void*> allocate_on(size_t bytes, cudaStream_t stream) {
    const size_t size = align16(std::max<size_t>(bytes, 1));
    if (limit_ && in_use_ + size > limit_)
      return DeviceError(Errc::out_of_memory, "cuda: allocating " + std::to_string(size) + " bytes would exceed the " +
                                                  std::to_string(limit_) + "-byte memory limit (" +
                                                  std::to_string(in_use_.load()) + " bytes in use)");
    void* p = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&p, size, pool_, stream);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      (void)cudaMemPoolTrimTo(pool_, 0);
      e = cudaMallocFromPoolAsync(&p, size, pool_, stream);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return DeviceError(Errc::out_of_memory, "cuda: out of device memory allocating " + std::to_string(size) +
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
  DeviceError order(cudaStream_t from, cudaStream_t to) {
    cudaEvent_t ev = nullptr;
    SY_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, from);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(to, ev, 0);
    // Destroying a recorded event is fine: the wait keeps its own reference.
    (void)cudaEventDestroy(ev);
    SY_CUDA_TRY(e);
    return {};
  }

  /// Marks the device lost (the first sticky error wins); true when this
  /// call was the one that did.
  bool mark_lost(cudaError_t e) noexcept {
    int expected = cudaSuccess;
    return lost_.compare_exchange_strong(expected, static_cast<int>(e));
  }
  [[nodiscard]] bool lost() const noexcept { return lost_.load() != cudaSuccess; }
  /// The error every request gets once the device is lost.
  [[nodiscard]] DeviceError lost_error() const {
    const auto e = static_cast<cudaError_t>(lost_.load());
    return DeviceError(Errc::device_lost, "cuda:" + std::to_string(index_) + " lost: " + cudaGetErrorName(e) + " (" +
                                              cudaGetErrorString(e) +
                                              "); the device is unusable until the process restarts");
  }
  /// Checks both streams for a sticky error; marks the device lost if so.
  bool detect_lost() noexcept {
    if (lost()) return true;
    for (cudaStream_t s : {copy_, compute_}) {
      if (!s) continue;
      const cudaError_t e = cudaStreamQuery(s);
      if (is_sticky(s, e)) {
        mark_lost(e);
        return true;
      }
      if (e != cudaSuccess && e != cudaErrorNotReady) (void)cudaGetLastError();
    }
    return false;
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
  bool allow_tf32_;
  std::atomic<uint64_t> in_use_{0};
  std::atomic<int> lost_{cudaSuccess};  // the sticky cudaError_t once lost
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
/// zero): a record on the device (kern::check_record_words int64s) that the
/// kernel flags. A buffer carries at most one record: an op whose inputs
/// (and own kernel) bring several folds them into a new one (first set
/// wins, inputs first), and one with a single source shares it, so the
/// records a read copies and ops merge stay bounded. A read copies the
/// record with the data and fails when it is flagged; one seen clear is
/// clear for good (its writers precede the read in stream order) and is
/// no longer inherited.
struct Check {
  BlockPtr record;
  mutable std::atomic<bool> seen_clear{false};
};
using CheckPtr = std::shared_ptr<const Check>;

/// The error a flagged record describes.
DeviceError check_error(const int64_t (&r)[kern::check_record_words]) {
  static constexpr const char* names[] = {"gather", "scatter_add", "index_select"};
  const int64_t op = r[3] & 0xff, axis = r[3] >> 8;
  if (op == kern::check_division)
    return DeviceError(Errc::kernel_failure,
                       std::string(to_string(static_cast<BinaryKind>(axis))) + ": integer division by zero");
  const char* name = op >= 0 && op < 3 ? names[op] : "index op";
  return DeviceError(Errc::index_out_of_range, std::string(name) + ": index " + std::to_string(r[1]) +
                                                   " is out of range for extent " + std::to_string(r[2]) + " of axis " +
                                                   std::to_string(axis));
}

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(BlockPtr block, size_t size) : block_(std::move(block)), size_(size) {}
  [[nodiscard]] size_t size() const noexcept override { return size_; }
  [[nodiscard]] void* data() const noexcept { return block_->data(); }
  [[nodiscard]] const BlockPtr& block() const noexcept { return block_; }
  /// The data check this buffer's values depend on (null: none pending).
  [[nodiscard]] const CheckPtr& check() const noexcept { return check_; }
  void set_check(CheckPtr c) { check_ = std::move(c); }

 private:
  BlockPtr block_;
  size_t size_;
  CheckPtr check_;
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

  Expected<std::pair<std::byte*, size_t>> take(size_t bytes) {
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
  CheckPtr check;     // copied after the data when set
};

// Fill, pad and eye values with the shared conversion rule (the CPU's).
uint64_t bits_for(DType t, double v) {
  return visit_dtype(t, [&](auto tag) { return backends::bits_of<decltype(tag)>(v); });
}

DeviceError unsupported(const std::string& what, DType t) {
  return DeviceError(Errc::unsupported, "cuda: " + what + " is not defined for " + std::string(name_of(t)));
}

// --- the backend --------------------------------------------------------------

class CudaBackend final : public Backend {
 public:
  CudaBackend(int index, const DeviceOptions& options)
      : dev_(std::make_shared<DeviceState>(index, options.memory_limit, options.allow_tf32)),
        inbox_(std::make_unique<Inbox>()) {
    init_error_ = dev_->init();
    if (!init_error_) watchdog_ = std::thread([this] { watch(); });
  }

  ~CudaBackend() override {
    {
      std::lock_guard lock(watch_mutex_);
      stop_watch_ = true;
    }
    watch_cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    // Wait for the copy stream so no host function touches the inbox after
    // it is gone; the DeviceState (shared with surviving buffers) goes last.
    // (On a lost device this returns the sticky error at once.)
    if (cudaSetDevice(dev_->index()) == cudaSuccess && dev_->copy()) (void)cudaStreamSynchronize(dev_->copy());
    (void)cudaGetLastError();
    // Unfinished reads are dropped, not called back: the runner is going
    // away with us (its promises then report a broken promise).
    for (auto& p : pending_) {
      if (dev_->lost())
        pinned_.abandon(p.chunk);
      else
        pinned_.give(p.chunk, p.chunk_size);
    }
    pending_.clear();
    orphans_.clear();
  }

  [[nodiscard]] std::string_view kind() const noexcept override { return "cuda"; }
  // Every dtype has kernels (f16/bf16 as __half/__nv_bfloat16); the table
  // stays the one source, so a dtype it withdraws is refused here too.
  [[nodiscard]] bool supports(DType t) const noexcept override { return dtype_support("cuda", t).storage; }

  Expected<BufferPtr> from_data(const TensorIr& t, TensorData data) override {
    if (init_error_) return init_error_;
    if (dev_->lost()) return dev_->lost_error();
    SY_CUDA_TRY(cudaSetDevice(dev_->index()));
    auto out = upload(t, data.bytes);
    if (!out) return lost_or(std::move(out.error()));
    return BufferPtr{std::move(*out)};
  }

  void to_data(const TensorIr& t, const BufferPtr& buffer, ReadCallback done) override {
    // NOLINTNEXTLINE(clang-analyzer-cplusplus.Move): start_read moves `done` only when it returns no error
    if (auto err = start_read(t, buffer, done)) done(lost_or(std::move(err)));
  }

  DeviceError execute(OperationIr& op, std::span<BufferPtr> inputs, std::span<BufferPtr> outputs) override {
    if (init_error_) return init_error_;
    if (dev_->lost()) return dev_->lost_error();
    SY_CUDA_TRY(cudaSetDevice(dev_->index()));
    for (const auto& b : inputs)
      if (!as_cuda(b)) return DeviceError(Errc::invalid_tensor, "cuda: input buffer of another backend");
    auto result = std::visit([&](auto& o) { return run(o, inputs); }, op.op);
    if (!result) return lost_or(std::move(result.error()));
    // Ops downstream of a data check inherit it, so their reads fail too.
    if (auto err = inherit_checks(**result, inputs)) return lost_or(std::move(err));
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
    in_flight_.store(pending_.size(), std::memory_order_relaxed);
    // On a lost device the host functions of the rest never run: fail them.
    if (!pending_.empty() && dev_->lost()) fail_pending();
  }

  DeviceError synchronize() override {
    if (init_error_) return init_error_;
    if (dev_->lost()) {
      poll();
      return dev_->lost_error();
    }
    SY_CUDA_TRY(cudaSetDevice(dev_->index()));
    cudaError_t e = cudaStreamSynchronize(dev_->copy());
    if (e == cudaSuccess) e = cudaStreamSynchronize(dev_->compute());
    if (e != cudaSuccess) {
      if (dev_->detect_lost()) {
        poll();
        return dev_->lost_error();
      }
      SY_CUDA_TRY(e);
    }
    poll();
    return {};
  }

  [[nodiscard]] MemoryStats memory() const override {
    if (init_error_ || dev_->lost()) return {};
    (void)cudaSetDevice(dev_->index());
    return dev_->memory();
  }

 private:
  using Result = Expected<std::shared_ptr<CudaBuffer>>;

  // --- a lost device ------------------------------------------------------------

  // The watchdog: while transfers are in flight, looks every 20 ms for a
  // sticky error on the device's streams, and wakes the runner when it finds
  // one (poll() then fails what is pending). Host functions never run once
  // the context is broken, so without it those reads would wait forever.
  void watch() {
    if (cudaSetDevice(dev_->index()) != cudaSuccess) (void)cudaGetLastError();
    std::unique_lock lock(watch_mutex_);
    while (!stop_watch_) {
      watch_cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (stop_watch_ || dev_->lost() || in_flight_.load(std::memory_order_relaxed) == 0) continue;
      if (dev_->detect_lost()) {
        std::lock_guard wake_lock(inbox_->mutex);
        if (inbox_->wake) inbox_->wake();
      }
    }
  }

  /// `err`, or the device-lost error when the failure was the device's end.
  DeviceError lost_or(DeviceError err) {
    if (dev_->lost() || dev_->detect_lost()) {
      if (!pending_.empty()) fail_pending();
      return dev_->lost_error();
    }
    return err;
  }

  /// Fails every pending read with the device-lost error. Their staging
  /// chunks and buffers are abandoned: a copy might still touch them.
  void fail_pending() {
    auto pending = std::move(pending_);
    pending_.clear();
    in_flight_.store(0, std::memory_order_relaxed);
    for (auto& p : pending) {
      pinned_.abandon(p.chunk);
      orphans_.push_back(std::move(p.buffer));
    }
    for (auto& p : pending)
      if (p.done) p.done(dev_->lost_error());
  }

  void add_pending(PendingTransfer p) {
    pending_.push_back(std::move(p));
    in_flight_.store(pending_.size(), std::memory_order_relaxed);
  }

  // --- transfers -------------------------------------------------------------

  Result upload(const TensorIr& t, const Bytes& bytes) {
    // Allocated on the copy stream: the upload overlaps the compute queued
    // before it; later compute waits for this upload only (the event below).
    auto block = new_block(bytes.size(), dev_->copy());
    if (!block) return std::move(block.error());
    auto out = std::make_shared<CudaBuffer>(std::move(*block), t.bytes());
    // The compute stream (which uses and frees the block) must come after
    // the allocation on the copy stream, on every way out.
    auto ready = [&] { return dev_->order(dev_->copy(), dev_->compute()); };
    if (bytes.size() == 0) {
      if (auto err = ready()) return err;
      return out;
    }
    auto chunk = pinned_.take(bytes.size());
    if (!chunk) {
      (void)ready();
      return std::move(chunk.error());
    }
    std::memcpy(chunk->first, bytes.data(), bytes.size());
    cudaError_t e = cudaMemcpyAsync(out->data(), chunk->first, bytes.size(), cudaMemcpyHostToDevice, dev_->copy());
    if (e != cudaSuccess) {
      pinned_.give(chunk->first, chunk->second);
      (void)ready();
      SY_CUDA_TRY(e);
    }
    // From here the chunk and the device memory belong to the copy until its
    // host function ran; on an error both are abandoned (kept until the
    // backend goes) rather than risk a copy still using them.
    e = cudaLaunchHostFunc(dev_->copy(), &Inbox::on_host, inbox_.get());
    if (e != cudaSuccess) {
      pinned_.abandon(chunk->first);
      orphans_.push_back(out);
      (void)ready();
      SY_CUDA_TRY(e);
    }
    add_pending(PendingTransfer{chunk->first, chunk->second, out, t, {}, {}});
    if (auto err = ready()) return err;
    return out;
  }

  DeviceError start_read(const TensorIr& t, const BufferPtr& buffer, ReadCallback& done) {
    if (init_error_) return init_error_;
    if (dev_->lost()) return dev_->lost_error();
    auto* b = as_cuda(buffer);
    if (!b) return DeviceError(Errc::invalid_tensor, "cuda: buffer of another backend");
    SY_CUDA_TRY(cudaSetDevice(dev_->index()));
    const size_t bytes = t.bytes();
    const size_t data_part = align16(bytes);
    CheckPtr check = b->check() && !b->check()->seen_clear.load() ? b->check() : nullptr;
    constexpr size_t record_bytes = kern::check_record_words * sizeof(int64_t);
    auto chunk = pinned_.take(data_part + (check ? record_bytes : 0));
    if (!chunk) return std::move(chunk.error());
    if (auto err = dev_->order(dev_->compute(), dev_->copy())) {
      pinned_.give(chunk->first, chunk->second);
      return err;
    }
    cudaError_t e =
        bytes ? cudaMemcpyAsync(chunk->first, b->data(), bytes, cudaMemcpyDeviceToHost, dev_->copy()) : cudaSuccess;
    const bool data_queued = bytes && e == cudaSuccess;
    if (e == cudaSuccess && check)
      e = cudaMemcpyAsync(chunk->first + data_part, check->record->data(), record_bytes, cudaMemcpyDeviceToHost,
                          dev_->copy());
    if (e == cudaSuccess) e = cudaLaunchHostFunc(dev_->copy(), &Inbox::on_host, inbox_.get());
    if (e != cudaSuccess) {
      // A copy may still be reading the buffer and writing the chunk: keep
      // both until the backend goes (the destructor waits for the stream).
      pinned_.abandon(chunk->first);
      if (data_queued || check) {
        orphans_.push_back(buffer);
        if (check) orphans_.push_back(check);
      }
      SY_CUDA_TRY(e);
    }
    add_pending(PendingTransfer{chunk->first, chunk->second, buffer, t, std::move(done), std::move(check)});
    return {};
  }

  // Completes a transfer whose copy is done: an upload returns its staging
  // chunk; a read checks the data-check record, copies the data out of the
  // staging chunk and then calls back (once, outside the try).
  void finish(PendingTransfer& p) {
    if (!p.done) {
      pinned_.give(p.chunk, p.chunk_size);
      return;
    }
    Expected<TensorData> result = DeviceError(Errc::kernel_failure, "cuda: read: no result");
    try {
      result = read_result(p);
    } catch (const std::exception& ex) {  // bad_alloc for the host copy: the runner must live on
      result = DeviceError(Errc::out_of_memory, std::string("cuda: read: ") + ex.what());
    }
    pinned_.give(p.chunk, p.chunk_size);
    p.buffer.reset();
    p.done(std::move(result));
  }

  Expected<TensorData> read_result(const PendingTransfer& p) const {
    const size_t bytes = p.ir.bytes();
    const size_t data_part = align16(bytes);
    if (p.check) {
      int64_t record[kern::check_record_words];
      std::memcpy(record, p.chunk + data_part, sizeof record);
      if (record[0] != 0) return check_error(record);
      p.check->seen_clear.store(true);
    }
    return TensorData(p.ir.shape, p.ir.dtype, Bytes::copy_of(p.chunk, bytes));
  }

  /// Gives `out` the one data check its value depends on: none, the single
  /// pending one among its inputs' and its own, or a fold of several.
  DeviceError inherit_checks(CudaBuffer& out, std::span<BufferPtr> inputs) {
    std::vector<CheckPtr> sources;
    auto add = [&](const CheckPtr& c) {
      if (c && !c->seen_clear.load() && std::find(sources.begin(), sources.end(), c) == sources.end())
        sources.push_back(c);
    };
    for (const auto& b : inputs) add(as_cuda(b)->check());
    add(out.check());  // the op's own check last: its inputs' failures came first
    if (sources.size() <= 1) {
      out.set_check(sources.empty() ? nullptr : sources.front());
      return {};
    }
    // Fold max_fold at a time; each fold's result is the next fold's first source.
    CheckPtr folded = sources.front();
    size_t next = 1;
    while (next < sources.size()) {
      kern::CheckSources in;
      in.records[in.count++] = static_cast<const int64_t*>(folded->record->data());
      while (next < sources.size() && in.count < kern::max_fold)
        in.records[in.count++] = static_cast<const int64_t*>(sources[next++]->record->data());
      auto record = new_block(kern::check_record_words * sizeof(int64_t));
      if (!record) return std::move(record.error());
      SY_CUDA_TRY(kern::fold_checks(dev_->launch(), in, static_cast<int64_t*>((*record)->data())));
      auto c = std::make_shared<Check>();
      c->record = std::move(*record);
      folded = std::move(c);
    }
    out.set_check(std::move(folded));
    return {};
  }

  // --- helpers -----------------------------------------------------------------

  Expected<BlockPtr> new_block(size_t bytes) { return new_block(bytes, dev_->compute()); }
  Expected<BlockPtr> new_block(size_t bytes, cudaStream_t stream) {
    auto p = dev_->allocate_on(bytes, stream);
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
  Expected<const void*> as_dtype(const BufferPtr& b, DType from, DType to, int64_t n, BlockPtr& scratch) {
    if (from == to) return static_cast<const void*>(as_cuda(b)->data());
    auto block = new_block(static_cast<size_t>(n) * size_of(to));
    if (!block) return std::move(block.error());
    scratch = std::move(*block);
    SY_CUDA_TRY(kern::cast(dev_->launch(), as_cuda(b)->data(), from, scratch->data(), to, n));
    return static_cast<const void*>(scratch->data());
  }

  /// A fresh data-check record for op `op` (kern::CheckOp).
  Expected<std::shared_ptr<Check>> new_check(int op, int64_t extent, int64_t axis) {
    auto record = new_block(kern::check_record_words * sizeof(int64_t));
    if (!record) return std::move(record.error());
    SY_CUDA_TRY(kern::init_check(dev_->launch(), static_cast<int64_t*>((*record)->data()), extent, op | (axis << 8)));
    auto c = std::make_shared<Check>();
    c->record = std::move(*record);
    return c;
  }

  static void* ptr(const BufferPtr& b) { return as_cuda(b)->data(); }
  static int64_t* status_of(const std::shared_ptr<Check>& c) { return static_cast<int64_t*>(c->record->data()); }

  /// Turns a kernel entry's status into an error; NotSupported names the op.
  static DeviceError kernel_status(cudaError_t e, const std::string& what, DType t, const char* expr, const char* file,
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
    if (divides(o.kind) && !is_floating(compute)) {
      auto c = new_check(kern::check_division, 0, static_cast<int64_t>(o.kind));
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
    if (check) (*out)->set_check(check);
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
      T v;
      if constexpr (is_half_v<T>)
        v = backends::from_double<T>(o.scalar.to_double());  // as the CPU rounds it: through double and float
      else
        v = o.scalar.as<T>();
      scalar_zero = static_cast<double>(v) == 0;
      std::memcpy(&scalar_bits, &v, sizeof(T));
    });
    const bool int_division = divides(o.kind) && !is_floating(compute);
    if (int_division && !o.scalar_first && scalar_zero)
      return DeviceError(Errc::kernel_failure, std::string(to_string(o.kind)) + ": integer division by zero");
    BlockPtr sa;
    auto a = as_dtype(in[0], o.lhs.dtype, compute, o.lhs.numel(), sa);
    if (!a) return std::move(a.error());
    std::shared_ptr<Check> check;
    if (int_division && o.scalar_first) {
      auto c = new_check(kern::check_division, 0, static_cast<int64_t>(o.kind));
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
    if (check) (*out)->set_check(check);
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
    // Scratch for split reductions (x.sum() over many elements): freed
    // stream-ordered after the kernels.
    BlockPtr scratch;
    const size_t scratch_bytes = kern::reduce_scratch_bytes(dev_->launch(), kept, o.out.numel(), count);
    if (scratch_bytes > 0) {
      auto block = new_block(scratch_bytes);
      if (!block) return std::move(block.error());
      scratch = std::move(*block);
    }
    SY_KERNEL_TRY(
        kern::reduce(dev_->launch(), static_cast<int>(o.kind), o.in.dtype, o.out.dtype, ptr(in[0]), (*out)->data(),
                     kept, o.out.numel(), red, count, o.correction, scratch ? scratch->data() : nullptr, scratch_bytes),
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
    } else if (is_half(o.out.dtype)) {
      // The bias goes into C first and the GEMM adds to it (beta = 1), so the
      // f32 sum of products plus bias is rounded to f16/bf16 once, as on the
      // CPU (which adds the bias in f32 before narrowing).
      const bool with_bias = o.has_bias();
      if (with_bias) {
        auto bl = make_layout<2>(od, {broadcast_strides(o.bias.shape, o.out.shape), o.out.shape.strides()});
        SY_CUDA_TRY(kern::copy_strided(l, size_of(o.out.dtype), ptr(in[2]), 0, c, 0, bl, o.out.numel()));
      }
      if (auto err = gemm(o, ptr(in[0]), ptr(in[1]), c, m, n, k, layout, batches, with_bias)) return err;
      return out;
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
  // cuBLAS gets B first with the row-major leading dimensions. f32 and f64
  // use the typed GEMMs; f16 and bf16 the Ex ones with 16-bit A, B and C and
  // f32 compute (tensor cores). `accumulate`: C += A B (16-bit types only).
  DeviceError gemm(const MatmulOp& o, const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k,
                   const kern::Layout<2>& layout, int64_t batches, bool accumulate = false) {
    constexpr int64_t imax = INT_MAX;
    if (m > imax || n > imax || k > imax || batches > imax)
      return DeviceError(Errc::unsupported, "cuda: matmul extents beyond 2^31 are not supported by this backend");
    const cublasOperation_t op_a = o.transpose_lhs ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = o.transpose_rhs ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = static_cast<int>(o.transpose_lhs ? m : k);
    const int ldb = static_cast<int>(o.transpose_rhs ? k : n);
    const int M = static_cast<int>(n), N = static_cast<int>(m), K = static_cast<int>(k);
    const int64_t a_mat = m * k, b_mat = k * n, c_mat = m * n;
    const bool f64 = o.out.dtype == DType::f64;
    const bool half = is_half(o.out.dtype);
    const cudaDataType_t half_type = o.out.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const float ex_alpha = 1, ex_beta = accumulate ? 1.0f : 0.0f;  // f32: the compute type scales
    cublasHandle_t h = dev_->blas();
    // Regular batches (no batch axes, or one merged axis): strided batched.
    if (layout.rank <= 1) {
      const int64_t sa = layout.rank ? layout.strides[0][0] * a_mat : 0;
      const int64_t sb = layout.rank ? layout.strides[1][0] * b_mat : 0;
      const int count = static_cast<int>(batches);
      if (half) {
        SY_CUBLAS_TRY(cublasGemmStridedBatchedEx(h, op_b, op_a, M, N, K, &ex_alpha, b, half_type, ldb, sb, a, half_type,
                                                 lda, sa, &ex_beta, c, half_type, M, c_mat, count, CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT));
      } else if (f64) {
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
    if (half) {
      SY_CUBLAS_TRY(cublasGemmBatchedEx(h, op_b, op_a, M, N, K, &ex_alpha, const_cast<const void* const*>(pb),
                                        half_type, ldb, const_cast<const void* const*>(pa), half_type, lda, &ex_beta,
                                        pc, half_type, M, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else if (f64) {
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

  // scatter and scatter_reduce(prod/amax/amin): one thread per index column
  // walking the axis in order (deterministic, last write wins), after
  // check_indices has recorded the first bad index in index order.
  Result scatter_kinds(IndexOp& o, std::span<BufferPtr> in) {
    static_assert(static_cast<int>(IndexKind::scatter) == kern::scatter_assign &&
                  static_cast<int>(IndexKind::scatter_prod) == kern::scatter_prod &&
                  static_cast<int>(IndexKind::scatter_amax) == kern::scatter_amax &&
                  static_cast<int>(IndexKind::scatter_amin) == kern::scatter_amin);
    const auto& ind = o.in.shape.dims;
    const int64_t axis_len = ind.empty() ? 1 : ind[o.axis];
    auto check = new_check(kern::check_scatter_add, axis_len, o.axis);
    if (!check) return std::move(check.error());
    auto out = new_buffer(o.out);
    if (!out) return out;
    const auto l = dev_->launch();
    if (o.out.bytes() > 0)
      SY_CUDA_TRY(cudaMemcpyAsync((*out)->data(), ptr(in[0]), o.out.bytes(), cudaMemcpyDeviceToDevice, l.stream));
    const int64_t count = o.index.numel();
    SY_CUDA_TRY(kern::check_indices(l, o.index.dtype, ptr(in[1]), count, axis_len, status_of(*check)));
    if (count > 0) {
      auto out_strides = o.out.shape.strides();
      auto src_strides = o.src.shape.strides();
      auto idx_strides = o.index.shape.strides();
      auto dims = o.index.shape.dims;
      int64_t m = 1, out_axis = 0, src_axis = 0, idx_axis = 0;
      if (!dims.empty()) {
        m = dims[o.axis];
        out_axis = out_strides[o.axis];
        src_axis = src_strides[o.axis];
        idx_axis = idx_strides[o.axis];
        dims[o.axis] = 1;
        out_strides[o.axis] = src_strides[o.axis] = idx_strides[o.axis] = 0;
      }
      auto columns = make_layout<3>(dims, {out_strides, src_strides, idx_strides});
      SY_KERNEL_TRY(kern::scatter_lines(l, static_cast<int>(o.kind), o.in.dtype, o.index.dtype, ptr(in[2]), ptr(in[1]),
                                        (*out)->data(), columns, count / m, m, out_axis, src_axis, idx_axis, axis_len),
                    to_string(o.kind), o.in.dtype);
    }
    (*out)->set_check(*check);
    return out;
  }

  Result run(IndexOp& o, std::span<BufferPtr> in) {
    static constexpr int ops[] = {kern::check_gather, kern::check_scatter_add, kern::check_index_select};
    if (static_cast<size_t>(o.kind) >= std::size(ops)) return scatter_kinds(o, in);
    const auto& ind = o.in.shape.dims;
    const int64_t axis_len = ind.empty() ? 1 : ind[o.axis];
    auto check = new_check(ops[static_cast<int>(o.kind)], axis_len, o.axis);
    if (!check) return std::move(check.error());
    auto out = new_buffer(o.out);
    if (!out) return out;
    const size_t w = size_of(o.in.dtype);
    const auto l = dev_->launch();
    int64_t* status = status_of(*check);
    switch (o.kind) {
      case IndexKind::index_select: {
        // Every index is checked, the first bad one reported (as on the CPU).
        SY_CUDA_TRY(kern::check_indices(l, o.index.dtype, ptr(in[1]), o.index.numel(), axis_len, status));
        if (ind.empty()) {
          // A 0-d input has one element whatever the index holds (even none).
          SY_CUDA_TRY(cudaMemcpyAsync((*out)->data(), ptr(in[0]), w, cudaMemcpyDeviceToDevice, l.stream));
          break;
        }
        int64_t outer = 1, inner = 1;
        for (int64_t i = 0; i < o.axis; ++i) outer *= ind[i];
        for (size_t i = o.axis + 1; i < ind.size(); ++i) inner *= ind[i];
        SY_CUDA_TRY(kern::index_select(l, w, o.index.dtype, ptr(in[0]), ptr(in[1]), (*out)->data(), outer, axis_len,
                                       o.index.numel(), inner));
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
      default:  // refused above
        break;
    }
    (*out)->set_check(*check);
    return out;
  }

  Result run(ConvOp& o, std::span<BufferPtr> in) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    SY_CUDA_TRY(kern::conv(dev_->launch(), o.out.dtype, conv_geometry(o), ptr(in[0]), ptr(in[1]),
                           o.has_bias() ? ptr(in[2]) : nullptr, (*out)->data()));
    return out;
  }

  Result run(PoolOp& o, std::span<BufferPtr> in) {
    static_assert(kern::p_adaptive_max_indices == static_cast<int>(PoolKind::adaptive_max_indices));
    auto out = new_buffer(o.out);
    if (!out) return out;
    SY_CUDA_TRY(kern::pool(dev_->launch(), o.in.dtype, static_cast<int>(o.kind), pool_geometry(o), o.count_include_pad,
                           o.divisor_override, ptr(in[0]), (*out)->data()));
    return out;
  }

  // --- issue 18, part B: norms, attention, scans, sorting (modules.cu) ---

  Result run(NormOp& o, std::span<BufferPtr> in) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    size_t next = 1;
    const void* mean = nullptr;
    const void* var = nullptr;
    if (o.kind == NormKind::batch) {
      mean = ptr(in[next++]);
      var = ptr(in[next++]);
    }
    const void* w = o.has_weight() ? ptr(in[next++]) : nullptr;
    const void* b = o.has_bias() ? ptr(in[next++]) : nullptr;
    const auto& d = o.in.shape.dims;
    const int64_t n = o.in.numel();
    const auto l = dev_->launch();
    if (n == 0) return out;
    int64_t spatial = 1;
    for (size_t i = 2; i < d.size(); ++i) spatial *= d[i];
    switch (o.kind) {
      case NormKind::batch:
        SY_KERNEL_TRY(
            kern::batch_norm(l, o.in.dtype, ptr(in[0]), (*out)->data(), mean, var, w, b, n, d[1], spatial, o.eps),
            "batch_norm", o.in.dtype);
        break;
      case NormKind::group: {
        const int64_t per_group = d[1] / o.count;
        SY_KERNEL_TRY(kern::norm_rows(l, o.in.dtype, ptr(in[0]), (*out)->data(), w, b, d[0] * o.count,
                                      per_group * spatial, o.eps, false, o.count, per_group, spatial),
                      "group_norm", o.in.dtype);
        break;
      }
      case NormKind::layer:
      case NormKind::rms: {
        int64_t size = 1;
        for (size_t i = d.size() - static_cast<size_t>(o.count); i < d.size(); ++i) size *= d[i];
        SY_KERNEL_TRY(kern::norm_rows(l, o.in.dtype, ptr(in[0]), (*out)->data(), w, b, n / size, size, o.eps,
                                      o.kind == NormKind::rms, 0, 1, 1),
                      to_string(o.kind), o.in.dtype);
        break;
      }
    }
    return out;
  }

  Result run(AttentionOp& o, std::span<BufferPtr> in) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    const size_t r = o.q.shape.rank();
    const int64_t L = o.q.shape.dims[r - 2], E = o.q.shape.dims[r - 1];
    const int64_t S = o.k.shape.dims[r - 2], Ev = o.v.shape.dims[r - 1];
    if (o.out.numel() == 0) return out;
    const auto l = dev_->launch();
    if (S == 0) {  // softmax over no keys times an empty V: zeros, as on the CPU
      SY_CUDA_TRY(cudaMemsetAsync((*out)->data(), 0, o.out.bytes(), l.stream));
      return out;
    }
    std::vector<int64_t> batch_dims(o.q.shape.dims.begin(), o.q.shape.dims.end() - 2);
    int64_t batches = 1;
    for (auto x : batch_dims) batches *= x;
    std::vector<int64_t> mstrides(r, 0);
    int mask_kind = 0;
    if (o.has_mask()) {
      Shape scores = o.q.shape;
      scores.dims[r - 1] = S;
      mstrides = broadcast_strides(o.mask.shape, scores);
      mask_kind = o.mask.dtype == DType::boolean ? 1 : 2;
    }
    auto mask_batch = make_layout<1>(batch_dims, {std::vector<int64_t>(mstrides.begin(), mstrides.end() - 2)});
    SY_KERNEL_TRY(kern::attention(l, o.q.dtype, ptr(in[0]), ptr(in[1]), ptr(in[2]), o.has_mask() ? ptr(in[3]) : nullptr,
                                  mask_kind, mask_batch, mstrides[r - 2], mstrides[r - 1], (*out)->data(), batches, L,
                                  S, E, Ev, o.scale, o.causal),
                  "scaled_dot_product_attention", o.q.dtype);
    return out;
  }

  Result run(ScanOp& o, std::span<BufferPtr> in) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    const int64_t n = o.in.numel();
    if (n == 0) return out;
    const auto& d = o.in.shape.dims;
    int64_t len = d.empty() ? 1 : d[o.axis], inner = 1;
    for (size_t i = o.axis + 1; i < d.size(); ++i) inner *= d[i];
    // The input in the output dtype first (PyTorch's dtype= argument).
    BlockPtr converted;
    auto x = as_dtype(in[0], o.in.dtype, o.out.dtype, n, converted);
    if (!x) return std::move(x.error());
    SY_KERNEL_TRY(
        kern::scan(dev_->launch(), o.out.dtype, *x, (*out)->data(), n / len, len, inner, o.kind == ScanKind::cumprod),
        o.kind == ScanKind::cumprod ? "cumprod" : "cumsum", o.out.dtype);
    return out;
  }

  Result run(SortOp& o, std::span<BufferPtr> in) {
    auto out = new_buffer(o.out);
    if (!out) return out;
    const int64_t n = o.in.numel();
    if (o.out.numel() == 0) return out;
    const auto& d = o.in.shape.dims;
    int64_t len = d.empty() ? 1 : d[o.axis], inner = 1;
    for (size_t i = o.axis + 1; i < d.size(); ++i) inner *= d[i];
    // Keys in f64 (exact for every dtype but i64, which sorts as itself).
    const DType key_t = o.in.dtype == DType::i64 ? DType::i64 : DType::f64;
    BlockPtr converted;
    auto keys = as_dtype(in[0], o.in.dtype, key_t, n, converted);
    if (!keys) return std::move(keys.error());
    const auto l = dev_->launch();
    size_t bytes = 0;
    SY_KERNEL_TRY(kern::sort_positions(l, key_t, *keys, n, len, inner, o.descending, nullptr, &bytes), "argsort",
                  o.in.dtype);
    auto scratch = new_block(bytes);
    if (!scratch) return std::move(scratch.error());
    SY_KERNEL_TRY(kern::sort_positions(l, key_t, *keys, n, len, inner, o.descending, (*scratch)->data(), &bytes),
                  "argsort", o.in.dtype);
    const int64_t keep = o.kind == SortKind::topk && !d.empty() ? o.k : len;  // 0-d: its one position
    SY_CUDA_TRY(
        kern::sort_ranks(l, (*scratch)->data(), static_cast<int64_t*>((*out)->data()), n / len, len, inner, keep));
    return out;
  }

  Result run(DropOp&, std::span<BufferPtr>) {
    return DeviceError(Errc::protocol_error, "cuda: drop is handled by the runner");
  }
  Result run(SeedOp&, std::span<BufferPtr>) {
    return DeviceError(Errc::protocol_error, "cuda: seed is handled by the runner");
  }
#undef SY_KERNEL_TRY

  DevicePtr dev_;
  DeviceError init_error_;
  PinnedPool pinned_;
  std::unique_ptr<Inbox> inbox_;
  std::deque<PendingTransfer> pending_;               // in copy-stream order
  std::atomic<size_t> in_flight_{0};                  // pending_.size() for the watchdog
  std::vector<std::shared_ptr<const void>> orphans_;  // device memory a failed transfer may still use
  std::thread watchdog_;
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool stop_watch_ = false;
  uint64_t consumed_ = 0;
  uint64_t seed_ = 0;
  uint64_t random_ops_ = 0;
};

}  // namespace

namespace testing {

std::string break_context(int device) {
  CurrentDeviceGuard keep_current;
  if (cudaSetDevice(device) != cudaSuccess) return "cudaSetDevice failed";
  cudaStream_t stream = nullptr;  // never destroyed: the context is gone with it
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "no stream";
  cudaError_t e = kern::write_through_bad_pointer(kern::Launch{stream, 1});
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  return cudaGetErrorName(e);
}

int current_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

}  // namespace testing

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
