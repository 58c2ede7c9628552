// SPDX-License-Identifier: Apache-2.0
#include "worker/entry.hpp"

#include <map>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "switchyard/messages/protocol.hpp"

namespace switchyard::worker {
namespace {

struct EntryState {
  std::vector<LocalDevice> devices;
  caf::io::middleman_actor connector;
  // Monitored client actors and their nodes: a node's tensors are freed
  // when its last monitored actor goes.
  std::map<caf::actor_addr, caf::node_id> clients;
  static inline const char* name = "switchyard.worker.entry";
};

using Reply = caf::result<uint32_t, std::vector<std::string>, std::vector<std::string>, std::vector<caf::actor>,
                          uint16_t, std::string>;

}  // namespace

caf::actor spawn_entry(caf::actor_system& sys, std::vector<LocalDevice> devices, caf::io::middleman_actor connector,
                       EntryLog log, EntryLane lane) {
  // Devices and connector travel as spawn arguments: CAF 0.17 spawning a
  // function actor with no arguments dereferences a null shared_ptr<tuple<>>
  // (UBSan: reference binding to null pointer).
  return sys.spawn(
      [log = std::move(log), lane = std::move(lane)](caf::stateful_actor<EntryState>* self,
                                                     std::vector<LocalDevice> devices,
                                                     caf::io::middleman_actor connector) -> caf::behavior {
        self->state.devices = std::move(devices);
        self->state.connector = std::move(connector);
        // A hostile or confused peer gets an error naming what it sent, and the
        // entry keeps serving (the CAF default would also log to stderr).
        self->set_default_handler([](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
          return make_error(Errc::protocol_error, "worker: unexpected message " + caf::to_string(x.content()));
        });
        // Forgets one client actor; its node's tensors go with its last one.
        auto forget = [self, log, lane](const caf::actor_addr& client, const caf::error& reason) {
          auto it = self->state.clients.find(client);
          if (it == self->state.clients.end()) return;
          auto node = it->second;
          self->state.clients.erase(it);
          // A client whose runtime shut down says bye or quits normally (its
          // Runtime's destructor: user_shutdown); any other reason
          // (remote_link_unreachable: killed, network gone) is a lost client.
          if (!reason || reason == caf::exit_reason::normal || reason == caf::exit_reason::user_shutdown) {
            if (log.info) log.info("client " + caf::to_string(node) + " disconnected");
          } else if (log.stopping && log.stopping->load()) {
            if (log.info) log.info("client " + caf::to_string(node) + " disconnected: the worker is stopping");
          } else if (log.warn) {
            log.warn("client " + caf::to_string(node) + " lost: " + caf::to_string(reason));
          }
          for (const auto& [addr, n] : self->state.clients)
            if (n == node) return;  // another connection of that client lives on
          if (auto l = lane.lane.lock()) l->revoke(node);
          for (const auto& d : self->state.devices) self->send(d.runner, detach_atom::value, node);
        };
        self->set_down_handler([forget](caf::down_msg& msg) { forget(msg.source, msg.reason); });
        return {
            [self, log, lane](hello_atom, uint32_t version, caf::actor& client) -> Reply {
              if (version != protocol_version)
                return make_error(Errc::protocol_error, "protocol version mismatch: worker speaks " +
                                                            std::to_string(protocol_version) + ", client speaks " +
                                                            std::to_string(version));
              if (!client) return make_error(Errc::protocol_error, "hello without a client actor");
              if (self->state.clients.emplace(client.address(), client.node()).second) {
                self->monitor(client);
                if (log.info) log.info("client " + caf::to_string(client.node()) + " connected");
              }
              std::vector<std::string> names, kinds;
              std::vector<caf::actor> runners;
              for (const auto& d : self->state.devices) {
                names.push_back(d.name);
                kinds.push_back(d.kind);
                runners.push_back(d.runner);
              }
              // The lane admits the node the hello came from (BASP's, not the
              // node the message names), so a token reaches only its client.
              const auto sender = self->current_sender() ? self->current_sender()->node() : caf::node_id{};
              auto l = lane.lane.lock();
              std::string token = l && sender && sender == client.node() ? l->admit(sender) : std::string{};
              const uint16_t port = token.empty() ? 0 : lane.port;
              return {protocol_version, std::move(names), std::move(kinds), std::move(runners), port, std::move(token)};
            },
            [self, forget](bye_atom, caf::actor& client) -> caf::result<done_atom> {
              // Only a client's own node may say it leaves: another peer could
              // otherwise free that client's tensors.
              if (!client || !self->current_sender() || self->current_sender()->node() != client.node())
                return make_error(Errc::protocol_error, "worker: bye for another node's client");
              self->demonitor(client);
              forget(client.address(), caf::error{});
              return done_atom::value;
            },
            [self](peer_atom, std::string& host, uint16_t port) -> caf::result<done_atom> {
              auto rp = self->make_response_promise<done_atom>();
              self->request(self->state.connector, std::chrono::seconds(10), caf::connect_atom::value, std::move(host),
                            port)
                  .then([rp](const caf::node_id&, const caf::strong_actor_ptr&,
                             const std::set<std::string>&) mutable { rp.deliver(done_atom::value); },
                        [rp](caf::error& e) mutable {
                          rp.deliver(make_error(Errc::device_lost, "worker: cannot reach peer: " + caf::to_string(e)));
                        });
              return rp;
            },
        };
      },
      std::move(devices), std::move(connector));
}

}  // namespace switchyard::worker
