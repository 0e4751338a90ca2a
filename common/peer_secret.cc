#include "common/peer_secret.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/rand.h>

#include "absl/strings/str_cat.h"

namespace dtrain {

absl::StatusOr<std::string> NewPeerSecret() {
  std::string secret(kPeerSecretBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()), kPeerSecretBytes) != 1) {
    char why[256];
    ERR_error_string_n(ERR_get_error(), why, sizeof(why));
    return absl::InternalError(
        absl::StrCat("cannot make a peer secret: OpenSSL's random generator failed: ", why));
  }
  return secret;
}

bool PeerSecretsEqual(absl::string_view a, absl::string_view b) {
  // The length is not secret (every secret has kPeerSecretBytes); only the bytes are.
  if (a.size() != b.size()) return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace dtrain
