// SPDX-License-Identifier: Apache-2.0
#include "worker/listen_checks.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <memory>
#include <netdb.h>
#include <sys/socket.h>

#include "switchyard/messages/tls_files.hpp"

namespace switchyard::worker {

ResolvedHost resolve_listen_host(const std::string& host) {
  ResolvedHost out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), "0", &hints, &list);
  if (rc != 0) {
    out.error = "cannot resolve '" + host + "': " + gai_strerror(rc);
    return out;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(list, &::freeaddrinfo);
  for (auto* ai = list; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = ai->ai_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr);
    if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) && ::inet_ntop(ai->ai_family, raw, text, sizeof text))
      if (std::find(out.addresses.begin(), out.addresses.end(), text) == out.addresses.end())
        out.addresses.emplace_back(text);
  }
  // IPv4 first: "localhost" then binds 127.0.0.1, as before this check.
  std::stable_partition(out.addresses.begin(), out.addresses.end(),
                        [](const std::string& a) { return a.find(':') == std::string::npos; });
  if (out.addresses.empty()) out.error = "'" + host + "' resolves to no IPv4 or IPv6 address";
  return out;
}

bool is_loopback_address(const std::string& numeric) {
  in_addr v4{};
  if (::inet_pton(AF_INET, numeric.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, numeric.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

std::string check_tls_files(const std::string& cert, const std::string& key, const std::string& ca) {
  return switchyard::check_tls_files({cert, "--cert"}, {key, "--key"}, {ca, "--ca"});
}

}  // namespace switchyard::worker
