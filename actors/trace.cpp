// SPDX-License-Identifier: Apache-2.0
#include "actors/trace.hpp"

#include <cstdio>

namespace switchyard::actors {

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

Tracer::Tracer(std::string path) : path_(std::move(path)) {}

Tracer::~Tracer() {
  FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "switchyard: cannot write trace file '%s'\n", path_.c_str());
    return;
  }
  std::fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n%s\n]}\n", events_.c_str());
  std::fclose(f);
}

double Tracer::micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - start_).count();
}

void Tracer::name_track(uint32_t track, std::string_view name) {
  char head[96];
  std::snprintf(head, sizeof head, "{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":\"",
                track);
  std::string e = head + json_escape(name) + "\"}}";
  std::lock_guard lock(mutex_);
  if (!events_.empty()) events_ += ",\n";
  events_ += e;
}

void Tracer::slice(uint32_t track, std::string_view name, Clock::time_point begin, Clock::time_point end,
                   std::string_view args) {
  char head[128];
  std::snprintf(head, sizeof head, "{\"ph\":\"X\",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"name\":\"", track,
                micros(begin), micros(end) - micros(begin));
  std::string e = head + json_escape(name) + "\",\"args\":{" + std::string(args) + "}}";
  std::lock_guard lock(mutex_);
  if (!events_.empty()) events_ += ",\n";
  events_ += e;
}

void Tracer::flow_begin(uint32_t track, uint64_t id, Clock::time_point at) {
  char e[160];
  std::snprintf(e, sizeof e,
                "{\"ph\":\"s\",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"id\":%llu,\"name\":\"bridge\",\"cat\":\"bridge\"}",
                track, micros(at), static_cast<unsigned long long>(id));
  std::lock_guard lock(mutex_);
  if (!events_.empty()) events_ += ",\n";
  events_ += e;
}

void Tracer::flow_end(uint32_t track, uint64_t id, Clock::time_point at) {
  char e[176];
  std::snprintf(e, sizeof e,
                "{\"ph\":\"f\",\"bp\":\"e\",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"id\":%llu,\"name\":\"bridge\","
                "\"cat\":\"bridge\"}",
                track, micros(at), static_cast<unsigned long long>(id));
  std::lock_guard lock(mutex_);
  if (!events_.empty()) events_ += ",\n";
  events_ += e;
}

}  // namespace switchyard::actors
