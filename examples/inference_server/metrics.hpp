// SPDX-License-Identifier: Apache-2.0
#pragma once

// Prometheus text-format pieces: a cumulative histogram and a counter map.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace serve {

/// `v` as Prometheus text, exactly: an integer where `v` is one (below
/// 2^53, where every integer is a double), else the shortest decimal that
/// reads back as the same double (never the stream default of 6 significant
/// digits, which printed a sum of 1280140.5 as 1.28014e+06).
[[nodiscard]] inline std::string format_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(v));
    return std::string(buf, p);
  }
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, p);
}

/// A Prometheus histogram with fixed upper bounds (thread safe).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}

  void observe(double v) {
    std::lock_guard lock(mu_);
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
  }

  /// Appends `name`'s HELP, TYPE, cumulative buckets, sum and count.
  void render(std::ostringstream& out, const std::string& name, const std::string& help) const {
    std::lock_guard lock(mu_);
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += counts_[i];
      out << name << "_bucket{le=\"" << format_number(bounds_[i]) << "\"} " << cumulative << '\n';
    }
    cumulative += counts_.back();
    out << name << "_bucket{le=\"+Inf\"} " << cumulative << '\n';
    out << name << "_sum " << format_number(sum_) << '\n' << name << "_count " << count_ << '\n';
  }

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

/// Counters keyed by one label value (e.g. HTTP status code).
class LabeledCounter {
 public:
  void add(const std::string& label, uint64_t n = 1) {
    std::lock_guard lock(mu_);
    values_[label] += n;
  }
  void render(std::ostringstream& out, const std::string& name, const std::string& label_name,
              const std::string& help) const {
    std::lock_guard lock(mu_);
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " counter\n";
    for (const auto& [k, v] : values_) out << name << '{' << label_name << "=\"" << k << "\"} " << v << '\n';
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> values_;
};

}  // namespace serve
