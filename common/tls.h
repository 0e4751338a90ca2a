// Mutual TLS for every gRPC channel of dtrain: the coordinator's API (CLI, worker registration
// and heartbeats) and the workers' peer service (activations, gradients, collectives). One
// cluster CA signs every certificate (`dtrain certs init DIR` makes them: client/certs.h).
//
//   TlsFiles tls{.ca = "certs/ca.pem", .cert = "certs/worker.pem", .key = "certs/worker.key"};
//   RETURN_IF_ERROR(ValidateTlsFiles(tls, "the worker"));       // at start, before listening
//   ASSIGN_OR_RETURN(auto server_creds, ServerCredentials(tls));  // requires a client cert
//   ASSIGN_OR_RETURN(auto channel_creds, ChannelCredentials(tls));
//   ...
//   ASSIGN_OR_RETURN(PeerIdentity who, PeerIdentityOf(*context));  // in an RPC handler
//   if (who.role != kRoleAdmin) return PERMISSION_DENIED;
//
// Identity convention: a certificate's subject CN is its holder's NAME (a worker id, a user)
// and its subject OU is its ROLE, one of kRoleAdmin, kRoleUser, kRoleViewer, kRoleWorker,
// kRoleCoordinator. A server started with --insecure sees every caller as role kRoleInsecure.
//
// Host names: the coordinator's certificate carries DNS/IP SANs (localhost, 127.0.0.1, ::1,
// coordinator, dtrain-coordinator and every `--host` given to `dtrain certs`), checked by
// clients as usual. Workers dial peers by IP:port, so every worker certificate carries the DNS
// SAN kWorkerPeerHostname and peer channels verify that name (PeerChannelArguments).
//
// Rotation: servers and clients read their key, certificate and CA through gRPC's file-watching
// certificate provider, re-read every `reload_interval` (60 s): renewed files take effect for
// new connections without a restart, also on a long-lived channel (a worker's to the
// coordinator) when it next connects. Replace key and certificate together (e.g. by renaming a
// directory); a CA file may hold several CAs (to move to a new one).
#ifndef DTRAIN_COMMON_TLS_H_
#define DTRAIN_COMMON_TLS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"

namespace dtrain {

// What --tls_ca / --tls_cert / --tls_key / --insecure say: all three files, or insecure.
struct TlsFiles {
  std::string ca;    // PEM: the cluster CA that signs every peer's certificate
  std::string cert;  // PEM: this process's certificate (CN = name, OU = role)
  std::string key;   // PEM: its private key
  bool insecure = false;

  bool enabled() const { return !insecure; }
  // Plaintext: what in-process tests use, and the default of options structs below the daemons'
  // flags (the daemons always set it from --tls_* / --insecure).
  static TlsFiles Insecure() {
    TlsFiles files;
    files.insecure = true;
    return files;
  }
};

inline constexpr char kRoleAdmin[] = "admin";
inline constexpr char kRoleViewer[] = "viewer";
inline constexpr char kRoleUser[] = "user";  // submits jobs, changes only its own
inline constexpr char kRoleWorker[] = "worker";
inline constexpr char kRoleCoordinator[] = "coordinator";
inline constexpr char kRoleInsecure[] = "insecure";  // any caller of an --insecure server

// The DNS SAN every worker certificate carries and every peer channel verifies.
inline constexpr char kWorkerPeerHostname[] = "dtrain-worker";

// How often a server re-reads its certificate files (ServerCredentials).
inline constexpr absl::Duration kDefaultTlsReloadInterval = absl::Seconds(60);

// THE rule for TLS settings: either all three of ca, cert and key, or insecure; never both,
// never neither. Each file must be readable PEM (the CA and the certificate X.509
// certificates, the key a private key) and the key must match the certificate.
// `program` names who is asking in the message ("the coordinator", "the worker", "dtrain").
// InvalidArgument for a wrong combination or a file that is not what it should be, with what to
// pass instead; the file's own error code (NotFound, PermissionDenied) when it cannot be read.
absl::Status ValidateTlsFiles(const TlsFiles& files, absl::string_view program);

// Mutual TLS server credentials: the server presents `cert`, and REQUIRES a client certificate
// signed by `ca` (a client without one, or with one from another CA or expired, fails the
// handshake). Files re-read every `reload_interval`. InsecureServerCredentials when
// files.insecure. Validates first (ValidateTlsFiles).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& files, absl::Duration reload_interval = kDefaultTlsReloadInterval);

// Client credentials: presents `cert`, verifies the server's certificate against `ca` and its
// host name. Files re-read every `reload_interval`: a channel's next connection uses renewed
// ones. InsecureChannelCredentials when files.insecure. Validates the files the first time
// they are asked for; later calls with the same files return the same credentials.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const TlsFiles& files, absl::Duration reload_interval = kDefaultTlsReloadInterval);

// Sets what a worker-to-worker channel needs on top of ChannelCredentials: the server name
// checked against the peer's certificate is kWorkerPeerHostname (peers are dialled by IP).
// No-op when files.insecure.
void SetPeerChannelArguments(const TlsFiles& files, grpc::ChannelArguments* args);

// Who is calling, from the TLS handshake (see "Identity convention" above).
struct PeerIdentity {
  std::string name;  // subject CN; empty for an insecure caller
  std::string role;  // subject OU; kRoleInsecure for an insecure caller
};

// Unauthenticated when the connection is TLS but carries no client certificate (a server from
// ServerCredentials never accepts one) or the certificate has no CN or OU.
absl::StatusOr<PeerIdentity> PeerIdentityOf(const grpc::AuthContext& auth);
absl::StatusOr<PeerIdentity> PeerIdentityOf(const grpc::ServerContextBase& context);

// One line about a certificate for logs and errors: "CN=w1 OU=worker, expires 2027-11-25".
// An error when the file is not a readable PEM certificate.
absl::StatusOr<std::string> DescribeCertificateFile(const std::string& path);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_TLS_H_
