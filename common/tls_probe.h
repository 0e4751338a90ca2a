// Why a client (the CLI, a worker registering) could not talk to the coordinator, when the reason
// is TLS. gRPC reports every failed handshake of the server's making as "Socket closed" or a
// deadline; after a call fails as unreachable, the client opens one TLS connection of its own
// with OpenSSL (same CA, certificate and key) and reads what happened: which side refused whom,
// and why.
//
//   std::string why = DiagnoseTlsFailure("10.0.0.5:7070", tls, absl::Seconds(3));
//   // "the coordinator refused our certificate certs/old.pem (CN=old OU=admin): it expired on
//   //  2020-01-01 00:00:00 UTC (TLS alert: certificate expired)"
#ifndef DTRAIN_COMMON_TLS_PROBE_H_
#define DTRAIN_COMMON_TLS_PROBE_H_

#include <string>

#include "absl/time/time.h"
#include "common/tls.h"

namespace dtrain {

// One line saying why a TLS session with the server at `address` (HOST:PORT) cannot work:
//   - tls.insecure and the server speaks TLS: a plaintext client to a TLS server;
//   - a plaintext server (it does not answer a TLS handshake);
//   - the server's certificate does not verify against tls.ca, or is not for HOST;
//   - the server refused our certificate (another CA, expired, no client certificate), with
//     the TLS alert it sent.
// "" when nothing of that: the address does not accept connections, `tls` is not valid, or
// the handshake works. Every step is bounded by `timeout`.
std::string DiagnoseTlsFailure(const std::string& address, const TlsFiles& tls,
                               absl::Duration timeout);

// Whether a TCP connection to `address` (HOST:PORT) opens within `timeout`. A coordinator
// that accepts connections but answers no call within --timeout is hung, paused or
// overloaded: its kernel still completes the TCP handshake, its process does not speak.
bool AcceptsConnections(const std::string& address, absl::Duration timeout);

// The line for a call that went unanswered for `timeout` while the coordinator at `address`
// accepts connections: "connected to the coordinator at ADDR but no answer within 3s
// (--timeout): is it hung or overloaded?".
std::string NoAnswerWithin(const std::string& address, absl::Duration timeout);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_TLS_PROBE_H_
