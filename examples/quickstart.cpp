// SPDX-License-Identifier: Apache-2.0
// Quickstart: a two-layer MLP forward pass on cpu:0, moved to cpu:1 and
// read back, checked against a plain loop.
//
//   x[4x8] --linear+relu--> h[4x16] --linear--> y[4x3] --to(cpu:1)--> read
#include <cmath>
#include <cstdio>
#include <vector>

#include <switchyard/switchyard.hpp>

namespace sy = switchyard;

int main() {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cpu:1"}});
  auto cpu0 = rt.device("cpu:0");
  auto cpu1 = rt.device("cpu:1");

  const int64_t batch = 4, in = 8, hidden = 16, out = 3;
  auto values = [](int64_t n, float scale) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37) % 11 - 5);
    return v;
  };
  auto xv = values(batch * in, 0.10f), w1v = values(hidden * in, 0.05f), b1v = values(hidden, 0.01f);
  auto w2v = values(out * hidden, 0.07f), b2v = values(out, 0.02f);

  auto x = cpu0.tensor(xv, {batch, in});
  auto w1 = cpu0.tensor(w1v, {hidden, in});
  auto b1 = cpu0.tensor(b1v, {hidden});
  auto w2 = cpu0.tensor(w2v, {out, hidden});
  auto b2 = cpu0.tensor(b2v, {out});

  auto h = x.linear(w1, b1).relu();          // queued, nothing waits
  auto y = h.linear(w2, b2).to(cpu1) * 2.0;  // bridged; the multiply waits on cpu:1
  std::vector<float> got = y.to_vector<float>();

  // The same computation as plain loops.
  std::vector<float> hid(batch * hidden), want(batch * out);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < hidden; ++j) {
      float s = b1v[j];
      for (int64_t k = 0; k < in; ++k) s += xv[b * in + k] * w1v[j * in + k];
      hid[b * hidden + j] = s > 0 ? s : 0;
    }
    for (int64_t j = 0; j < out; ++j) {
      float s = b2v[j];
      for (int64_t k = 0; k < hidden; ++k) s += hid[b * hidden + k] * w2v[j * hidden + k];
      want[b * out + j] = 2 * s;
    }
  }

  double max_err = 0;
  std::printf("y on %s (shape %s):\n", y.device().name().c_str(), y.shape().to_string().c_str());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < out; ++j) {
      std::printf("  %9.5f", got[b * out + j]);
      max_err = std::max(max_err, static_cast<double>(std::fabs(got[b * out + j] - want[b * out + j])));
    }
    std::printf("\n");
  }
  std::printf("max |switchyard - plain loop| = %.3g -> %s\n", max_err, max_err < 1e-4 ? "OK" : "MISMATCH");
  return max_err < 1e-4 ? 0 : 1;
}
