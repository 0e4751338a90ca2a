#include "coordinator/watch_limiter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tls.h"

namespace dtrain::coordinator {

WatchLimiter::Slot& WatchLimiter::Slot::operator=(Slot&& other) noexcept {
  if (this != &other) {
    if (limiter_ != nullptr) limiter_->Release(client_);
    limiter_ = std::exchange(other.limiter_, nullptr);
    client_ = std::move(other.client_);
  }
  return *this;
}

WatchLimiter::Slot::~Slot() {
  if (limiter_ != nullptr) limiter_->Release(client_);
}

absl::StatusOr<WatchLimiter::Slot> WatchLimiter::Acquire(const std::string& client) {
  {
    absl::MutexLock lock(&mu_);
    int& open = open_[client];
    if (max_per_client_ > 0 && open >= max_per_client_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("too many watches from this client (", open,
                       " open); close some or raise --max_watches_per_client"));
    }
    ++open;
  }
  Slot slot;
  slot.limiter_ = this;
  slot.client_ = client;
  return slot;
}

int WatchLimiter::open(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(client);
  return it == open_.end() ? 0 : it->second;
}

void WatchLimiter::Release(const std::string& client) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(client);
  if (it != open_.end() && --it->second <= 0) open_.erase(it);
}

std::string WatchClientOf(const grpc::ServerContextBase& context) {
  absl::StatusOr<PeerIdentity> who = PeerIdentityOf(context);
  if (who.ok() && !who->name.empty()) return absl::StrCat("cert:", who->name);
  const std::string peer = context.peer();  // "ipv4:127.0.0.1:54321", "ipv6:[::1]:54321"
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos || colon < peer.find(':') + 1 ? peer : peer.substr(0, colon);
}

}  // namespace dtrain::coordinator
