// `dtrain certs`: the cluster CA and the certificates of common/tls.h's convention (subject
// CN = name, OU = role), made with OpenSSL's libcrypto. Keys are EC P-256, written 0600.
//
//   dtrain certs init certs/ --host=10.0.0.5,coord.example.org
//     certs/ca.pem ca.key, coordinator.pem .key, worker.pem .key, admin.pem .key, viewer.pem .key
//   dtrain certs issue certs/ w7 --role=worker      (one more, signed by certs/ca.key)
//
// What each role's certificate carries:
//   coordinator  SANs localhost, 127.0.0.1, ::1, coordinator, dtrain-coordinator and every
//                --host; serverAuth + clientAuth
//   worker       SAN dtrain-worker (kWorkerPeerHostname: peers are dialled by IP) and every
//                --host; serverAuth (its peer service) + clientAuth (to the coordinator, peers)
//   admin,viewer clientAuth only; --host ignored
#ifndef DTRAIN_CLIENT_CERTS_H_
#define DTRAIN_CLIENT_CERTS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dtrain {
namespace client {

inline constexpr char kCaName[] = "ca";
inline constexpr int kDefaultCertDays = 365;

struct CertOptions {
  std::vector<std::string> hosts;       // extra DNS names / IPs (coordinator and worker certs)
  int days = kDefaultCertDays;          // valid from now (less 5 minutes of clock skew) for this
  std::optional<absl::Time> not_after;  // instead of days: valid until then (in the past:
                                        // an already expired certificate, for tests)
};

// The roles a certificate may carry (common/tls.h's kRole* but "insecure").
const std::vector<std::string>& CertificateRoles();

// Makes DIR (if missing), DIR/ca.pem + DIR/ca.key, and DIR/NAME.pem + DIR/NAME.key for NAME in
// coordinator, worker, admin, viewer (each of the role of its name). Returns the files written.
// AlreadyExists when DIR/ca.pem or DIR/ca.key exists (a CA is never replaced: every
// certificate it signed would stop working).
absl::StatusOr<std::vector<std::string>> InitCertificates(const std::string& dir,
                                                          const CertOptions& options);

// Writes DIR/NAME.pem + DIR/NAME.key, signed by DIR/ca.pem + DIR/ca.key, with subject CN=NAME
// OU=ROLE. InvalidArgument for a NAME that is not [A-Za-z0-9._-]+ or an unknown role;
// AlreadyExists when either file exists; the CA files' errors when they cannot be read.
absl::StatusOr<std::vector<std::string>> IssueCertificate(const std::string& dir,
                                                          const std::string& name,
                                                          const std::string& role,
                                                          const CertOptions& options);

// "2020-01-01" or "2020-01-01T12:00:00Z" as an absl::Time (UTC); InvalidArgument otherwise.
absl::StatusOr<absl::Time> ParseCertDate(const std::string& text);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_CERTS_H_
