// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <set>
#include <string_view>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/module_loader.hpp"
#include "backends/reference/reference_backend.hpp"
#include "switchyard/error.hpp"

namespace switchyard::backends {

std::vector<BackendKind> backend_kinds(const std::vector<std::string>& module_dirs) {
  std::vector<BackendKind> kinds;
  kinds.push_back(cpu::backend_kind());
  kinds.push_back(reference::backend_kind());
  // A module, whether or not this build made it (it may be installed apart):
  // loaded only when a cuda device is counted or created, and only where
  // the CUDA driver is present.
  kinds.push_back(module_kind("cuda", module_search_path(module_dirs), "libcuda.so.1", "no CUDA driver"));
  return kinds;
}

namespace {

// A kind's own reason for having no devices (optional for custom kinds);
// one that throws says so, as an Error like the kind's other entries.
std::string unavailable_reason(const BackendKind& kind) {
  auto why = kind.unavailable_reason
                 ? call_kind_entry(Errc::unknown_device, "backend kind '" + kind.name + "': unavailable_reason",
                                   [&] { return kind.unavailable_reason(); })
                 : std::string{};
  return why.empty() ? "no devices" : why;
}

// The index of "kind:N": N's decimal digits, no sign, no leading zero, no
// spaces (std::stoi took " 1", "+1" and "01", and "cpu:0" beside "cpu:00"
// was then two devices on one index); -1 for "*".
int parse_index(const std::string& name, std::string_view idx) {
  if (idx == "*") return -1;
  const bool digits = !idx.empty() && std::all_of(idx.begin(), idx.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || (idx.size() > 1 && idx.front() == '0') || idx.size() > 9)
    throw Error(Errc::unknown_device,
                "device name '" + name + "' has an invalid index '" + std::string(idx) + "' (a number, or *)");
  int index = 0;
  for (char c : idx) index = index * 10 + (c - '0');
  return index;
}

}  // namespace

std::vector<PlannedDevice> plan_devices(const std::vector<BackendKind>& kinds, const std::vector<std::string>& names,
                                        std::vector<std::string>& unavailable) {
  std::vector<PlannedDevice> plan;
  std::set<std::string> named;
  auto add = [&](const BackendKind& kind, int index) {
    auto full = kind.name + ":" + std::to_string(index);
    if (!named.insert(full).second) throw Error(Errc::invalid_argument, "device '" + full + "' requested twice");
    plan.push_back({std::move(full), &kind, index});
  };
  for (const auto& name : names) {
    const auto colon = name.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == name.size())
      throw Error(Errc::unknown_device,
                  "device name '" + name + "' is not of the form kind:index (e.g. cpu:0, cuda:*)");
    const std::string kind_name = name.substr(0, colon);
    const int index = parse_index(name, std::string_view(name).substr(colon + 1));
    auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.name == kind_name; });
    if (kind == kinds.end()) {
      if (index < 0) {
        // "kind:*" of a kind this library does not know: no such devices, which is fine.
        unavailable.push_back(kind_name + ": not compiled into this build");
        continue;
      }
      std::string known;
      for (const auto& k : kinds) known += (known.empty() ? "" : ", ") + k.name;
      // NOLINTBEGIN(performance-inefficient-string-concatenation): error path, the start fails
      throw Error(Errc::unknown_device,
                  "device '" + name + "': no backend '" + kind_name + "' in this build (have: " + known + ")");
      // NOLINTEND(performance-inefficient-string-concatenation)
    }
    const int count =
        call_kind_entry(Errc::unknown_device, "device '" + name + "': backend kind '" + kind->name + "': device_count",
                        [&] { return kind->device_count(); });
    if (index < 0) {
      if (count == 0) unavailable.push_back(kind->name + ": " + unavailable_reason(*kind));
      if (static_cast<size_t>(count) + plan.size() > max_planned_devices)
        throw Error(Errc::invalid_argument, "device '" + name + "' means " + std::to_string(count) + " " + kind->name +
                                                " devices, more than the " + std::to_string(max_planned_devices) +
                                                " a process holds: name them (e.g. " + kind->name + ":0," + kind->name +
                                                ":1)");
      for (int i = 0; i < count; ++i) add(*kind, i);
    } else if (index >= count) {
      throw Error(Errc::unknown_device, "device '" + name + "' does not exist: " + std::to_string(count) + " " +
                                            kind->name + " device(s)" +
                                            (count == 0 ? " (" + unavailable_reason(*kind) + ")" : ""));
    } else {
      add(*kind, index);
    }
  }
  return plan;
}

}  // namespace switchyard::backends
