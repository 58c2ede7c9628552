// SPDX-License-Identifier: Apache-2.0
#include "worker/listen_checks.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

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

namespace {

std::string openssl_error() {
  std::string out;
  while (auto code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// Readability first: "cannot read" with errno says more than OpenSSL's
// "system lib" for a missing or forbidden file.
std::string unreadable(const char* option, const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return std::string(option) + " '" + path + "': cannot read (" + (err ? std::strerror(err) : "cannot open") + ")";
  }
  // errno is not reset by a read that finds the end: an empty file (or
  // /dev/null) reported whatever had failed last, elsewhere.
  errno = 0;
  char c;
  if (!in.get(c)) {
    const int err = errno;
    return std::string(option) + " '" + path + "': cannot read (" + (err ? std::strerror(err) : "empty file") + ")";
  }
  return {};
}

}  // namespace

std::string check_tls_files(const std::string& cert, const std::string& key, const std::string& ca) {
  if (auto e = unreadable("--cert", cert); !e.empty()) return e;
  if (auto e = unreadable("--key", key); !e.empty()) return e;
  if (!ca.empty())
    if (auto e = unreadable("--ca", ca); !e.empty()) return e;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_method()), &SSL_CTX_free);
  if (!ctx) return "TLS: cannot create a context: " + openssl_error();
  // An encrypted key must fail here, not prompt on the terminal.
  SSL_CTX_set_default_passwd_cb(ctx.get(), [](char*, int, int, void*) { return 0; });
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1)
    return "--cert '" + cert + "': not a usable PEM certificate: " + openssl_error();
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1) {
    // OpenSSL 3 checks the match here already.
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
      return "--key '" + key + "' does not match --cert '" + cert + "': " + openssl_error();
    return "--key '" + key + "': not a usable PEM private key: " + openssl_error();
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return "--key '" + key + "' does not match --cert '" + cert + "': " + openssl_error();
  if (!ca.empty() && SSL_CTX_load_verify_locations(ctx.get(), ca.c_str(), nullptr) != 1)
    return "--ca '" + ca + "': not a usable PEM CA file: " + openssl_error();
  return {};
}

}  // namespace switchyard::worker
