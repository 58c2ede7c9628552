// SPDX-License-Identifier: Apache-2.0
#pragma once

// Start-up checks of switchyard-worker that refuse a dangerous or broken
// configuration before anything listens (exit code 2 in main).

#include <string>
#include <vector>

namespace switchyard::worker {

/// The numeric addresses `host` resolves to for listening (getaddrinfo,
/// TCP, passive), or `error` saying why it does not resolve.
struct ResolvedHost {
  std::vector<std::string> addresses;
  std::string error;
};
[[nodiscard]] ResolvedHost resolve_listen_host(const std::string& host);

/// Whether `numeric` (an IPv4 or IPv6 address as text) is a loopback
/// address: 127.0.0.0/8, ::1 or ::ffff:127.x.y.z. Anything else, including
/// 0.0.0.0 and ::, and text that is no address at all, is not.
[[nodiscard]] bool is_loopback_address(const std::string& numeric);

/// "" when the TLS files load: the certificate chain, the private key that
/// matches it and, if `ca` is not empty, the CA file. Otherwise an error
/// naming the option, the file and what is wrong with it.
[[nodiscard]] std::string check_tls_files(const std::string& cert, const std::string& key, const std::string& ca);

}  // namespace switchyard::worker
