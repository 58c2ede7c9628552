// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/tls_files.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace switchyard {
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

std::string check_tls_files(TlsFile cert_file, TlsFile key_file, TlsFile ca_file) {
  const auto& cert = cert_file.path;
  const auto& key = key_file.path;
  const auto& ca = ca_file.path;
  if (auto e = unreadable(cert_file.label, cert); !e.empty()) return e;
  if (auto e = unreadable(key_file.label, key); !e.empty()) return e;
  if (!ca.empty())
    if (auto e = unreadable(ca_file.label, ca); !e.empty()) return e;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_method()), &SSL_CTX_free);
  if (!ctx) return "TLS: cannot create a context: " + openssl_error();
  // An encrypted key must fail here, not prompt on the terminal.
  SSL_CTX_set_default_passwd_cb(ctx.get(), [](char*, int, int, void*) { return 0; });
  ERR_clear_error();
  auto mismatch = [&] {
    return std::string(key_file.label) + " '" + key + "' does not match " + cert_file.label + " '" + cert +
           "': " + openssl_error();
  };
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1)
    return std::string(cert_file.label) + " '" + cert + "': not a usable PEM certificate: " + openssl_error();
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1) {
    // OpenSSL 3 checks the match here already.
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) return mismatch();
    return std::string(key_file.label) + " '" + key + "': not a usable PEM private key: " + openssl_error();
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) return mismatch();
  if (!ca.empty() && SSL_CTX_load_verify_locations(ctx.get(), ca.c_str(), nullptr) != 1)
    return std::string(ca_file.label) + " '" + ca + "': not a usable PEM CA file: " + openssl_error();
  return {};
}

}  // namespace switchyard
