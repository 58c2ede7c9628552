// SPDX-License-Identifier: Apache-2.0
#include "actors/router.hpp"

#include <unordered_map>
#include <unordered_set>

#include <caf/all.hpp>

namespace switchyard::actors {
namespace {

// A request relayed to a runner, failed by the router if the runner is lost.
struct Outstanding {
  std::function<void(caf::error)> fail;
};

struct Device {
  std::string name;         // as the client knows it: "cpu:0", "127.0.0.1:4242/cpu:0"
  std::string remote_name;  // as its worker knows it ("cpu:0"); empty for local devices
  runner_actor runner;
  std::unordered_map<uint64_t, Outstanding> outstanding;
};

struct RouterState {
  std::unordered_map<DeviceId, Device> devices;
  // Why each lost device went, so later requests name it.
  std::unordered_map<DeviceId, std::string> lost;
  RouterOptions options;
  uint64_t next_token = 1;
  // Local runners told to stop and not yet seen down, and who waits for it.
  std::unordered_set<caf::actor_addr> stopping;
  caf::typed_response_promise<done_atom> stopped;
  static inline const char* name = "switchyard.router";
};

using Self = router_actor::stateful_pointer<RouterState>;

caf::error unknown_device(Self self, DeviceId id) {
  if (auto it = self->state.lost.find(id); it != self->state.lost.end())
    return make_error(Errc::device_lost, it->second);
  return make_error(Errc::unknown_device, "device #" + std::to_string(id) + " is not attached (never added)");
}

// Requests to a runner on another node need a deadline: CAF fails nothing
// outstanding when a peer dies (the down handler does, this is the backstop).
caf::duration timeout_for(Self self, const runner_actor& runner) {
  if (runner.node() == self->node()) return caf::infinite;
  return caf::duration{self->state.options.remote_timeout};
}

// Errors as the client should read them: naming the device as the client
// knows it. A remote runner prefixes its messages with its worker's name for
// it ("cpu:0: ..."), and CAF's own errors (a timeout) name no device at all.
// A failure the client already named, sent to a worker's runner (a poisoned
// tensor bridged there) starts with this byte, so that for_client does not
// take its "cpu:0: ..." for the worker's own cpu:0 when it comes back.
constexpr char client_named_mark = '\x1f';

caf::error for_client(Self self, const Device& d, const caf::error& err) {
  auto info = describe(err);
  if (!info.message.empty() && info.message.front() == client_named_mark)
    return make_error(info.code, info.message.substr(1), info.tensor);
  if (err.category() == caf::atom("system")) {
    auto code = static_cast<caf::sec>(err.code());
    if (code == caf::sec::request_timeout)
      return make_error(Errc::device_lost, "device " + d.name + " lost: no reply within " +
                                               std::to_string(self->state.options.remote_timeout.count()) +
                                               " ms (RuntimeOptions::remote_timeout)");
    return make_error(info.code, "device " + d.name + ": " + info.message);
  }
  if (!d.remote_name.empty() && info.message.starts_with(d.remote_name + ": "))
    return make_error(info.code, d.name + info.message.substr(d.remote_name.size()), info.tensor);
  return err;
}

void lose_device(Self self, DeviceId id, const std::string& why) {
  auto it = self->state.devices.find(id);
  if (it == self->state.devices.end()) return;
  auto outstanding = std::move(it->second.outstanding);
  auto name = it->second.name;
  self->state.devices.erase(it);
  auto message = "device " + name + " lost: " + why;
  self->state.lost[id] = message;
  if (self->state.options.on_lost) self->state.options.on_lost(id, message);
  for (auto& [token, o] : outstanding) o.fail(make_error(Errc::device_lost, message));
}

// A bridge's source failed: a lost connection or a timeout is news (warn);
// an op failure carried along was logged where it happened (debug).
void log_bridge_failure(Self self, const std::string& src_name, TensorId src_id, DeviceId dst, const caf::error& err) {
  auto info = describe(err);
  self->state.options.log.log(info.code == Errc::device_lost ? LogLevel::warn : LogLevel::debug, [&] {
    auto d = self->state.devices.find(dst);
    return "bridge of tensor #" + std::to_string(src_id.value) + " from " + src_name + " to " +
           (d != self->state.devices.end() ? d->second.name : "device #" + std::to_string(dst)) +
           " failed: " + info.message;
  });
}

// Relays a request to a device's runner; the reply (or the loss of the
// device) reaches the original requester.
template <class Reply, class... Ts>
caf::result<Reply> relay(Self self, DeviceId id, Ts... xs) {
  auto it = self->state.devices.find(id);
  if (it == self->state.devices.end()) return unknown_device(self, id);
  auto rp = self->make_response_promise<Reply>();
  auto token = self->state.next_token++;
  it->second.outstanding.emplace(token, Outstanding{[rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
  auto forget = [self, id, token] {
    if (auto d = self->state.devices.find(id); d != self->state.devices.end()) d->second.outstanding.erase(token);
  };
  self->request(it->second.runner, timeout_for(self, it->second.runner), xs...)
      .then(
          // By default capture: self and id are used only when Reply is
          // DeviceStats, and an explicit capture would be unused otherwise.
          [=](Reply& r) mutable {
            forget();
            if constexpr (std::is_same_v<Reply, DeviceStats>) {
              if (auto d = self->state.devices.find(id); d != self->state.devices.end()) r.device = d->second.name;
            }
            rp.deliver(std::move(r));
          },
          [self, id, rp, forget](caf::error& e) mutable {
            forget();
            if (!rp.pending()) return;
            if (auto d = self->state.devices.find(id); d != self->state.devices.end())
              rp.deliver(for_client(self, d->second, e));
            else
              rp.deliver(std::move(e));
          });
  return rp;
}

}  // namespace

router_actor spawn_router(caf::actor_system& sys, RouterOptions options) {
  // The options travel as a spawn argument: CAF 0.17 spawning a function
  // actor with no arguments dereferences a null shared_ptr<tuple<>> in
  // init_fun_factory_helper (UBSan: reference binding to null pointer).
  return sys.spawn(
      [](Self self, RouterOptions options) -> router_actor::behavior_type {
        self->state.options = std::move(options);
        // Shutting down: every relayed request still waiting is answered
        // first. An undelivered promise would leave its requester waiting
        // forever, and the actor system's destructor waits for it.
        self->set_exit_handler([self](caf::exit_msg& msg) {
          std::vector<DeviceId> ids;
          for (auto& [id, dev] : self->state.devices) ids.push_back(id);
          for (auto id : ids) lose_device(self, id, "the runtime is shutting down");
          self->quit(msg.reason);
        });
        self->set_down_handler([self](caf::down_msg& msg) {
          auto& st = self->state;
          if (st.stopping.erase(msg.source) > 0 && st.stopping.empty() && st.stopped.pending())
            st.stopped.deliver(done_atom::value);
          for (auto& [id, dev] : self->state.devices)
            if (dev.runner.address() == msg.source) {
              // A runner stopped by its backend carries a switchyard error:
              // its message, not CAF's rendering of the error object.
              std::string why;
              if (msg.reason == caf::exit_reason::remote_link_unreachable)
                why = "connection to its worker lost (remote_link_unreachable)";
              else if (msg.reason.category() == error_category)
                why = "runner stopped: " + describe(msg.reason).message;
              else
                why = "runner stopped (" + caf::to_string(msg.reason) + ")";
              lose_device(self, id, why);
              return;
            }
        });
        return {
            [self](submit_atom, DeviceId id, std::vector<OperationIr>& ops) {
              auto it = self->state.devices.find(id);
              if (it == self->state.devices.end()) return;  // lost: its futures fail through read/sync
              self->send(it->second.runner, submit_atom::value, std::move(ops));
            },
            [self](read_atom, DeviceId id, TensorId t) { return relay<TensorData>(self, id, read_atom::value, t); },
            [self](read_atom, DeviceId id, TensorId t, uint64_t offset, uint64_t max_bytes) {
              return relay<DataPart>(self, id, read_atom::value, t, offset, max_bytes);
            },
            [self](read_atom, DeviceId id, TensorId t, BulkTicket ticket) {
              return relay<done_atom>(self, id, read_atom::value, t, ticket);
            },
            [self](expect_atom, DeviceId id, TensorIr& ir) {
              auto it = self->state.devices.find(id);
              if (it == self->state.devices.end()) return;  // lost: ops on it fail through read/sync
              self->send(it->second.runner, expect_atom::value, std::move(ir));
            },
            [self](import_atom, DeviceId id, DataPart& part) {
              auto it = self->state.devices.find(id);
              if (it == self->state.devices.end()) return;
              // The runner acknowledges each part (bridges between runners pace
              // themselves by it). A client's upload is paced by its own queue;
              // if the part is lost with its device, the device's loss fails
              // what depends on it, so the answer is not needed here.
              self->request(it->second.runner, timeout_for(self, it->second.runner), import_atom::value,
                            std::move(part))
                  .then([](done_atom) {}, [](caf::error&) {});
            },
            [self](sync_atom, DeviceId id) { return relay<done_atom>(self, id, sync_atom::value); },
            [self](stats_atom, DeviceId id) { return relay<DeviceStats>(self, id, stats_atom::value); },
            [self](trim_atom, DeviceId id) { return relay<done_atom>(self, id, trim_atom::value); },
            [self](bridge_atom, DeviceId src, TensorId src_id, DeviceId dst, TensorIr& dst_ir) {
              auto& devs = self->state.devices;
              auto d = devs.find(dst);
              if (d == devs.end()) return;
              auto target = d->second.runner;
              // Expect first: ops on the new tensor, forwarded after this, wait
              // for it. A local runner had it from the client, which sends
              // that runner its batches itself.
              if (target.node() != self->node()) self->send(target, expect_atom::value, dst_ir);
              auto s = devs.find(src);
              if (s == devs.end()) {
                auto err = unknown_device(self, src);
                log_bridge_failure(self, "device #" + std::to_string(src), src_id, dst, err);
                self->send(target, import_atom::value, dst_ir.id, std::move(err));
                return;
              }
              auto token = self->state.next_token++;
              auto fail = [self, target, id = dst_ir.id](caf::error e) {
                if (target.node() != self->node()) e = client_named(e);
                self->send(target, import_atom::value, id, std::move(e));
              };
              s->second.outstanding.emplace(token, Outstanding{fail});
              self->request(s->second.runner, timeout_for(self, s->second.runner), export_atom::value, src_id,
                            caf::actor_cast<caf::actor>(target), dst_ir.id)
                  .then(
                      [self, src, token](done_atom) {
                        if (auto it = self->state.devices.find(src); it != self->state.devices.end())
                          it->second.outstanding.erase(token);
                      },
                      [self, src, src_id, dst, token, fail](caf::error& e) {
                        // The source's failure (a poisoned or missing tensor, a
                        // timeout) reaches the target through here, named.
                        auto it = self->state.devices.find(src);
                        if (it == self->state.devices.end() || it->second.outstanding.erase(token) == 0) return;
                        auto err = for_client(self, it->second, e);
                        log_bridge_failure(self, it->second.name, src_id, dst, err);
                        fail(std::move(err));
                      });
            },
            [self](attach_atom, DeviceId id, std::string& name, runner_actor& runner) {
              self->monitor(runner);
              self->state.lost.erase(id);
              // A remote device is "host:port/<its worker's name>".
              std::string remote_name;
              if (runner.node() != self->node())
                if (auto slash = name.find('/'); slash != std::string::npos) remote_name = name.substr(slash + 1);
              self->state.devices[id] = Device{std::move(name), std::move(remote_name), std::move(runner), {}};
              return done_atom::value;
            },
            [self](detach_atom, DeviceId id) { lose_device(self, id, "detached"); },
            [self](stop_atom) -> caf::result<done_atom> {
              // The router monitors each runner from its attach on, before any
              // peer can hold a reference to it, so CAF (which notifies the
              // newest monitor first) has already queued every other monitor's
              // down message when this one arrives. Core::shut_down relies on it.
              auto& st = self->state;
              for (auto& [id, dev] : st.devices)
                if (dev.runner.node() == self->node() && st.stopping.insert(dev.runner.address()).second)
                  self->send_exit(dev.runner, caf::exit_reason::user_shutdown);
              if (st.stopping.empty()) return done_atom::value;
              st.stopped = self->make_response_promise<done_atom>();
              return st.stopped;
            },
        };
      },
      std::move(options));
}

caf::error client_named(const caf::error& err) {
  if (err.category() == caf::atom("system")) return err;  // CAF's own: for_client names it anyway
  auto info = describe(err);
  if (!info.message.empty() && info.message.front() == client_named_mark) return err;
  return make_error(info.code, client_named_mark + info.message, info.tensor);
}

}  // namespace switchyard::actors
