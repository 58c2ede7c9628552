#pragma once

// Prometheus text-format pieces: a cumulative histogram and a counter map.
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace serve {

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
      out << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cumulative << '\n';
    }
    cumulative += counts_.back();
    out << name << "_bucket{le=\"+Inf\"} " << cumulative << '\n';
    out << name << "_sum " << sum_ << '\n' << name << "_count " << count_ << '\n';
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
