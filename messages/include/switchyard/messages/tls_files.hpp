// SPDX-License-Identifier: Apache-2.0
#pragma once

// One check of TLS files for both ends: the worker at start (exit 2) and a
// Runtime at construction (invalid_argument). CAF's OpenSSL manager loads
// them only at the first connection, where a file it cannot use shows as
// an exception on its multiplexer thread (printed to stdout) and a
// handshake that never completes.

#include <string>

namespace switchyard {

/// A TLS file and the name the caller gives it in errors ("--cert",
/// "RuntimeOptions::tls.cert").
struct TlsFile {
  const std::string& path;
  const char* label;
};

/// "" when the files load: the certificate chain, the private key that
/// matches it and, if `ca.path` is not empty, the CA file. Otherwise an
/// error naming the label, the file and what is wrong with it.
[[nodiscard]] std::string check_tls_files(TlsFile cert, TlsFile key, TlsFile ca);

}  // namespace switchyard
