// SPDX-License-Identifier: Apache-2.0
// GPU benchmarks: each line compares Switchyard on cuda:0 with the direct
// CUDA/cuBLAS call doing the same work, and the table comes last.
//
//   matmul          Tensor::matmul vs cublasGemmEx (TFLOP/s): f32, and f16/bf16
//                   on tensor cores with f32 accumulation (the backend's own
//                   math mode on both sides: no reduced-precision reductions)
//   elementwise     x * x and x + 1 vs cudaMemcpy device-to-device (GB/s, bytes read + written)
//   reductions      x.sum(), row and column sums vs cudaMemcpy device-to-device (GB/s read)
//   launch          a chain of tiny ops vs empty kernel launches (us per op)
//   host<->device   Device::from_data / Tensor::read vs pinned cudaMemcpy (GB/s)
//   peer            Tensor::to(cuda:1) (host staged) vs cudaMemcpyPeer (GB/s; needs 2 GPUs)
//
// Every measurement is bounded (fixed repetitions) and the whole run takes
// well under a minute on an H100/H200-class GPU.

#include <chrono>
#include <cstdio>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <functional>
#include <string>
#include <vector>

#include "switchyard/switchyard.hpp"

cudaError_t launch_empty(cudaStream_t stream, int n);

namespace sy = switchyard;
using Clock = std::chrono::steady_clock;

namespace {

struct Row {
  std::string name, unit;
  double switchyard = 0, direct = 0;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

#define BENCH_CHECK(expr)                                                                                 \
  do {                                                                                                    \
    if (auto e_ = (expr); e_ != 0) {                                                                      \
      std::fprintf(stderr, "%s failed (%d) at %s:%d\n", #expr, static_cast<int>(e_), __FILE__, __LINE__); \
      return false;                                                                                       \
    }                                                                                                     \
  } while (0)

/// Seconds per repetition of `f` on the direct side, timed with events.
bool time_direct(cudaStream_t s, int reps, const std::function<bool()>& f, double& out) {
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  if (!f()) return false;  // warm-up
  BENCH_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < reps; ++i)
    if (!f()) return false;
  BENCH_CHECK(cudaEventRecord(b, s));
  BENCH_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
  out = ms / 1e3 / reps;
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return true;
}

/// Seconds per repetition of `f` through Switchyard (sync included once).
double time_switchyard(const sy::Device& d, int reps, const std::function<void()>& f) {
  f();
  d.sync().get();
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  d.sync().get();
  return seconds_since(t0) / reps;
}

// An n x n x n product in dtype t (f32, f16 or bf16): Switchyard's matmul
// against cublasGemmEx on buffers of the same type, f32 compute.
bool bench_matmul(const sy::Device& gpu, int64_t n, sy::DType t, std::vector<Row>& rows) {
  auto a = gpu.uniform({n, n}, 0, 1, t);
  auto b = gpu.uniform({n, n}, 0, 1, t);
  const int reps = n >= 4096 ? 10 : 50;
  const double flop = 2.0 * n * n * n;
  double t_sy = time_switchyard(gpu, reps, [&] { (void)a.matmul(b); });
  const size_t bytes = static_cast<size_t>(n * n) * sy::size_of(t);
  const cudaDataType_t type = t == sy::DType::f16 ? CUDA_R_16F : t == sy::DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  void *da, *db, *dc;
  BENCH_CHECK(cudaMalloc(&da, bytes));
  BENCH_CHECK(cudaMalloc(&db, bytes));
  BENCH_CHECK(cudaMalloc(&dc, bytes));
  cublasHandle_t h;
  BENCH_CHECK(cublasCreate(&h));
  BENCH_CHECK(cublasSetMathMode(
      h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  const float one = 1, zero = 0;
  const int ni = static_cast<int>(n);
  double t_raw = 0;
  bool ok = time_direct(
      nullptr, reps,
      [&] {
        return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, db, type, ni, da, type, ni, &zero, dc, type,
                            ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
      },
      t_raw);
  cublasDestroy(h);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  if (!ok) return false;
  rows.push_back({"matmul " + std::string(sy::name_of(t)) + " " + std::to_string(n), "TFLOP/s", flop / t_sy / 1e12,
                  flop / t_raw / 1e12});
  return true;
}

bool bench_elementwise(const sy::Device& gpu, std::vector<Row>& rows) {
  const int64_t n = int64_t{1} << 26;  // 256 MiB of f32
  const double bytes = n * 4.0;
  auto x = gpu.uniform({n});
  double t_mul = time_switchyard(gpu, 20, [&] { (void)(x * x); });
  double t_add = time_switchyard(gpu, 20, [&] { (void)(x + 1.0); });
  void *src, *dst;
  BENCH_CHECK(cudaMalloc(&src, n * 4));
  BENCH_CHECK(cudaMalloc(&dst, n * 4));
  double t_copy = 0;
  bool ok = time_direct(
      nullptr, 20, [&] { return cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyDeviceToDevice, nullptr) == cudaSuccess; },
      t_copy);
  cudaFree(src);
  cudaFree(dst);
  if (!ok) return false;
  rows.push_back({"x * x vs D2D copy", "GB/s", 2 * bytes / t_mul / 1e9, 2 * bytes / t_copy / 1e9});
  rows.push_back({"x + 1 vs D2D copy", "GB/s", 2 * bytes / t_add / 1e9, 2 * bytes / t_copy / 1e9});
  return true;
}

// Reductions read their input once: GB/s counts the bytes read, against
// the copy's bytes read + written (the goal: >= 70% for a 256M sum).
bool bench_reduce(const sy::Device& gpu, std::vector<Row>& rows) {
  const int64_t n = int64_t{1} << 28;  // 1 GiB of f32
  const double bytes = n * 4.0;
  auto x = gpu.uniform({n});
  double t_sum = time_switchyard(gpu, 10, [&] { (void)x.sum(); });
  auto m = x.reshape({int64_t{1} << 14, int64_t{1} << 14});
  double t_rows = time_switchyard(gpu, 10, [&] { (void)m.sum({1}); });
  double t_cols = time_switchyard(gpu, 10, [&] { (void)m.sum({0}); });
  void *src, *dst;
  BENCH_CHECK(cudaMalloc(&src, n * 4));
  BENCH_CHECK(cudaMalloc(&dst, n * 4));
  double t_copy = 0;
  bool ok = time_direct(
      nullptr, 10, [&] { return cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyDeviceToDevice, nullptr) == cudaSuccess; },
      t_copy);
  cudaFree(src);
  cudaFree(dst);
  if (!ok) return false;
  const double copy = 2 * bytes / t_copy / 1e9;
  rows.push_back({"sum 256M f32 vs D2D copy", "GB/s", bytes / t_sum / 1e9, copy});
  rows.push_back({"row sums 16k x 16k vs copy", "GB/s", bytes / t_rows / 1e9, copy});
  rows.push_back({"column sums 16k x 16k vs copy", "GB/s", bytes / t_cols / 1e9, copy});
  return true;
}

bool bench_launch(const sy::Device& gpu, std::vector<Row>& rows) {
  const int ops = 5000;
  auto y = gpu.zeros({1});
  auto t0 = Clock::now();
  for (int i = 0; i < ops; ++i) y = y + 1.0;
  (void)y.read().get();
  const double t_sy = seconds_since(t0) / ops;
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreate(&s));
  BENCH_CHECK(launch_empty(s, 100));
  BENCH_CHECK(cudaStreamSynchronize(s));
  auto t1 = Clock::now();
  BENCH_CHECK(launch_empty(s, ops));
  BENCH_CHECK(cudaStreamSynchronize(s));
  const double t_raw = seconds_since(t1) / ops;
  cudaStreamDestroy(s);
  rows.push_back({"per-op overhead", "us/op", t_sy * 1e6, t_raw * 1e6});
  return true;
}

bool bench_host(const sy::Device& cpu, const sy::Device& gpu, std::vector<Row>& rows) {
  const int64_t n = int64_t{1} << 26;  // 256 MiB
  const double bytes = n * 4.0;
  auto data = cpu.uniform({n}).read().get();
  double t_up = time_switchyard(gpu, 5, [&] { (void)gpu.from_data(data); });
  auto x = gpu.from_data(data);
  gpu.sync().get();
  auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) (void)x.read().get();
  const double t_down = seconds_since(t0) / 5;
  void *host, *dev;
  BENCH_CHECK(cudaMallocHost(&host, n * 4));
  BENCH_CHECK(cudaMalloc(&dev, n * 4));
  double t_h2d = 0, t_d2h = 0;
  bool ok =
      time_direct(
          nullptr, 5, [&] { return cudaMemcpyAsync(dev, host, n * 4, cudaMemcpyHostToDevice, nullptr) == cudaSuccess; },
          t_h2d) &&
      time_direct(
          nullptr, 5, [&] { return cudaMemcpyAsync(host, dev, n * 4, cudaMemcpyDeviceToHost, nullptr) == cudaSuccess; },
          t_d2h);
  cudaFreeHost(host);
  cudaFree(dev);
  if (!ok) return false;
  rows.push_back({"host -> device", "GB/s", bytes / t_up / 1e9, bytes / t_h2d / 1e9});
  rows.push_back({"device -> host", "GB/s", bytes / t_down / 1e9, bytes / t_d2h / 1e9});
  return true;
}

bool bench_peer(const std::vector<sy::Device>& gpus, std::vector<Row>& rows) {
  const int64_t n = int64_t{1} << 26;
  const double bytes = n * 4.0;
  auto x = gpus[0].uniform({n});
  gpus[0].sync().get();
  auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) {
    auto y = x.to(gpus[1]);
    gpus[1].sync().get();
  }
  const double t_sy = seconds_since(t0) / 5;
  void *a, *b;
  BENCH_CHECK(cudaSetDevice(1));
  BENCH_CHECK(cudaMalloc(&b, n * 4));
  BENCH_CHECK(cudaSetDevice(0));
  BENCH_CHECK(cudaMalloc(&a, n * 4));
  int can = 0;
  BENCH_CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
  if (can) (void)cudaDeviceEnablePeerAccess(1, 0);
  (void)cudaGetLastError();
  double t_raw = 0;
  bool ok = time_direct(
      nullptr, 5, [&] { return cudaMemcpyPeerAsync(b, 1, a, 0, n * 4, nullptr) == cudaSuccess; }, t_raw);
  cudaFree(a);
  cudaSetDevice(1);
  cudaFree(b);
  cudaSetDevice(0);
  if (!ok) return false;
  rows.push_back(
      {std::string("cuda:0 -> cuda:1") + (can ? "" : " (no P2P)"), "GB/s", bytes / t_sy / 1e9, bytes / t_raw / 1e9});
  return true;
}

}  // namespace

int main() {
  size_t printed = 0;
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cuda:*"}});
  std::vector<sy::Device> gpus;
  for (auto& d : rt.devices())
    if (d.kind() == "cuda") gpus.push_back(d);
  if (gpus.empty()) {
    std::printf("no CUDA device (%s): nothing to benchmark\n",
                rt.unavailable().empty() ? "?" : rt.unavailable().front().c_str());
    return 77;
  }
  std::vector<Row> rows;
  // Each row is printed as soon as it is measured: a benchmark that hangs
  // or fails later still leaves the earlier rows in the log.
  auto step = [&](bool done) {
    for (size_t i = printed; i < rows.size(); ++i)
      std::printf("measured: %s %.3f %s (direct %.3f)\n", rows[i].name.c_str(), rows[i].switchyard,
                  rows[i].unit.c_str(), rows[i].direct);
    printed = rows.size();
    std::fflush(stdout);
    return done;
  };
  using sy::DType;
  bool ok =
      step(bench_matmul(gpus[0], 1024, DType::f32, rows)) && step(bench_matmul(gpus[0], 4096, DType::f32, rows)) &&
      step(bench_matmul(gpus[0], 4096, DType::f16, rows)) && step(bench_matmul(gpus[0], 4096, DType::bf16, rows)) &&
      step(bench_matmul(gpus[0], 8192, DType::f16, rows)) && step(bench_matmul(gpus[0], 8192, DType::bf16, rows)) &&
      step(bench_elementwise(gpus[0], rows)) && step(bench_reduce(gpus[0], rows)) &&
      step(bench_launch(gpus[0], rows)) && step(bench_host(rt.device("cpu:0"), gpus[0], rows));
  if (ok && gpus.size() >= 2) ok = step(bench_peer(gpus, rows));
  std::printf("\n%-28s %-8s %12s %12s %7s\n", "benchmark", "unit", "switchyard", "direct", "ratio");
  for (const auto& r : rows)
    std::printf("%-28s %-8s %12.3f %12.3f %7.2f\n", r.name.c_str(), r.unit.c_str(), r.switchyard, r.direct,
                r.direct > 0 ? r.switchyard / r.direct : 0.0);
  if (gpus.size() < 2) std::printf("(peer bandwidth needs 2 GPUs; %zu found)\n", gpus.size());
  return ok ? 0 : 1;
}
