// The per-run peer secret (Placement.peer_secret in proto/job.proto): the coordinator makes one
// for every placement of a job and sends it to that run's workers only; every peer stream's
// HELLO carries it and the peer service accepts a stream only when it is its own run's. One
// place for how it is made and how it is compared.
//
//   ASSIGN_OR_RETURN(std::string secret, NewPeerSecret());      // coordinator, at placement
//   if (!PeerSecretsEqual(hello.job_secret(), mine)) refuse();   // peer service, per stream
//
// A secret is never logged, shown or put in an error message (name the job instead).
#ifndef DTRAIN_COMMON_PEER_SECRET_H_
#define DTRAIN_COMMON_PEER_SECRET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain {

// Bytes in a secret: 128 bits.
inline constexpr int kPeerSecretBytes = 16;

// kPeerSecretBytes from OpenSSL's CSPRNG (RAND_bytes, seeded by the kernel). Internal when the
// generator fails (it is not seeded: never use a weaker source instead).
absl::StatusOr<std::string> NewPeerSecret();

// Whether `a` and `b` are the same bytes, in time that depends on their lengths only
// (CRYPTO_memcmp), so a caller cannot learn a secret byte by byte from response times. Two
// empty secrets are equal (a transport started without one, as in-process tests do).
bool PeerSecretsEqual(absl::string_view a, absl::string_view b);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_PEER_SECRET_H_
