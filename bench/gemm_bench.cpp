// SPDX-License-Identifier: Apache-2.0
// f32 GEMM: the cpu backend's native AVX-512 kernel (backends/cpu/f32_gemm.cpp)
// against cblas_sgemm as this process's OpenBLAS runs it (OPENBLAS_CORETYPE
// decides: run it once per core type), interleaved call by call.
//
//     gemm_bench [--threads N] [--rounds R] [--cpu-time 1] [--only SUBSTRING]
//
// Prints one line per shape: median and best GFLOP/s of each, and the ratio
// of medians (native / OpenBLAS, above 1: native faster). With --threads 1
// --cpu-time 1 it counts the thread's CPU time instead of wall time, which
// other processes on a shared machine disturb much less (both kernels then
// run on the calling thread).
#include <algorithm>
#include <cblas.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "backends/cpu/f32_gemm.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace cpu = switchyard::backends::cpu;

namespace {

struct Shape {
  const char* name;
  int64_t m, n, k;
  bool tb;  // B given as its n x k transpose (linear's weight)
  /// Distinct B matrices taken in turn, call by call: 16 of a model's
  /// weights (4 MiB for 128 x 512) come from L3 or memory on every call,
  /// as in a model's forward pass, where one stays in L2.
  int copies = 1;
};

// The conv layer as GEMM (ResNet 3x3, 64 channels, 56x56), bench/'s matmul
// sizes, the MLP 784-512-512-10 at batch 64 (x @ w^T) and attention heads.
const Shape shapes[] = {
    {"conv3x3_64x3136x576", 64, 3136, 576, false},
    {"conv1x1_64x3136x256", 64, 3136, 256, false},
    {"layer4_512x49x4608", 512, 49, 4608, false},
    {"matmul_256", 256, 256, 256, false},
    {"matmul_1024", 1024, 1024, 1024, false},
    {"matmul_2048", 2048, 2048, 2048, false},
    {"mlp_64x512x784_T", 64, 512, 784, true},
    {"mlp_64x512x512_T", 64, 512, 512, true},
    {"mlp_64x10x512_T", 64, 10, 512, true},
    {"linear_1x256x256_T", 1, 256, 256, true},
    {"matmul_64x4x64", 64, 4, 64, false},
    {"matmul_17x17x17", 17, 17, 17, false},
    // One head of the ONNX transformer encoder's attention (sequence 128, head 8).
    {"attn_pv_128x8x128", 128, 8, 128, false},
    {"attn_qk_128x128x8", 128, 128, 8, false},
    // A transformer's feed-forward products at sequence 16 and 128
    // (d_model 128, 512 wide), their weights in L2 and from memory.
    {"ff_16x512x128", 16, 512, 128, false},
    {"ff_16x512x128_cold", 16, 512, 128, false, 16},
    {"ff_16x128x512_cold", 16, 128, 512, false, 16},
    {"ff_128x512x128_cold", 128, 512, 128, false, 16},
};

bool cpu_time = false;

double now() {
  if (cpu_time) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 15;
  std::string only;  // --only SUBSTRING: the shapes whose names hold it
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--cpu-time") == 0) cpu_time = std::atoi(argv[i + 1]) != 0;
  }
  if (!cpu::cpu_has_avx512f()) {
    std::printf("no AVX-512F: the native kernel does not run here\n");
    return 0;
  }
  if (threads != 1) cpu_time = false;
  openblas_set_num_threads(threads);
  cpu::ThreadPool pool(static_cast<size_t>(threads));
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  std::printf("threads %d, %s time, OPENBLAS_CORETYPE=%s, %s\n", threads, cpu_time ? "CPU" : "wall",
              core ? core : "(unset)", openblas_get_config());
  std::printf("%-22s %10s %10s %10s %10s %7s\n", "shape", "nat med", "nat best", "blas med", "blas best", "ratio");
  for (const Shape& s : shapes) {
    if (std::string(s.name).find(only) == std::string::npos) continue;
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n * s.copies)),
        c(static_cast<size_t>(s.m * s.n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7919) % 201) / 100.0f - 1.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 104729) % 199) / 100.0f - 1.0f;
    cpu::F32Gemm g;
    g.m = s.m;
    g.n = s.n;
    g.k = s.k;
    g.lda = s.k;
    g.ldb = s.tb ? s.k : s.n;
    g.b_transposed = s.tb;
    g.ldc = s.n;
    const float* b_now = b.data();  // the B of this call
    g.locate = [&](int64_t) { return cpu::F32GemmOperands{a.data(), b_now, c.data(), nullptr}; };
    int turn = 0;
    auto next_b = [&] {
      turn = (turn + 1) % s.copies;
      b_now = b.data() + static_cast<size_t>(turn) * static_cast<size_t>(s.k * s.n);
    };
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    // Enough calls per sample for ~20 ms.
    const int calls = std::max(1, static_cast<int>(2e-2 / (flops / 100e9)));
    std::vector<double> nat, blas;
    for (int r = 0; r < rounds + 1; ++r) {
      double t0 = now();
      for (int i = 0; i < calls; ++i) {
        next_b();
        if (!cpu::gemm_f32(pool, g)) return 1;
      }
      const double tn = (now() - t0) / calls;
      t0 = now();
      for (int i = 0; i < calls; ++i) {
        next_b();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(s.m),
                    static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.0f, a.data(), static_cast<blasint>(s.k),
                    b_now, static_cast<blasint>(g.ldb), 0.0f, c.data(), static_cast<blasint>(s.n));
      }
      const double tb = (now() - t0) / calls;
      if (r == 0) continue;  // warm-up
      nat.push_back(flops / tn / 1e9);
      blas.push_back(flops / tb / 1e9);
    }
    // A wrong kernel must not look fast: compare the last results.
    std::vector<float> c_blas = c;
    if (!cpu::gemm_f32(pool, g)) return 1;
    double worst = 0;
    for (size_t i = 0; i < c.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::abs(c[i] - c_blas[i])) / (1.0 + std::abs(c_blas[i])));
    if (worst > 1e-3) {
      std::printf("%s: native and OpenBLAS differ by %g\n", s.name, worst);
      return 1;
    }
    std::sort(nat.begin(), nat.end());
    std::sort(blas.begin(), blas.end());
    const double nm = nat[nat.size() / 2], bm = blas[blas.size() / 2];
    std::printf("%-22s %10.1f %10.1f %10.1f %10.1f %7.2f\n", s.name, nm, nat.back(), bm, blas.back(), nm / bm);
  }
  return 0;
}
