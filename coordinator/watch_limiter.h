// Caps the streams (WatchJob, JobLogs) one client holds open on the coordinator at once, so a
// client cannot pin unbounded memory and reactors with watches it never closes.
//
//   WatchLimiter watches(16);                       // --max_watches_per_client
//   ASSIGN_OR_RETURN(WatchLimiter::Slot slot, watches.Acquire(WatchClientOf(*context)));
//   // ... the stream keeps `slot` until it ends; its destructor frees it.
//
// A client is its certificate's name when the call came over mutual TLS (common/tls.h
// PeerIdentity), else its address without the port ("ipv4:10.0.0.7"), so that one user's many
// connections count together.
#ifndef DTRAIN_COORDINATOR_WATCH_LIMITER_H_
#define DTRAIN_COORDINATOR_WATCH_LIMITER_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace dtrain::coordinator {

class WatchLimiter {
 public:
  // A held stream of one client; movable; frees its place when destroyed.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept { *this = std::move(other); }
    Slot& operator=(Slot&& other) noexcept;
    ~Slot();

   private:
    friend class WatchLimiter;
    WatchLimiter* limiter_ = nullptr;
    std::string client_;
  };

  // `max_per_client` <= 0: no cap.
  explicit WatchLimiter(int max_per_client) : max_per_client_(max_per_client) {}

  // A place for one more stream of `client`. ResourceExhausted "too many watches from this
  // client (16 open); close some or raise --max_watches_per_client" when it holds the cap.
  absl::StatusOr<Slot> Acquire(const std::string& client);

  int open(const std::string& client) const;  // streams `client` holds now

 private:
  void Release(const std::string& client);

  const int max_per_client_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> open_ ABSL_GUARDED_BY(mu_);
};

// The client a call counts against (see the top).
std::string WatchClientOf(const grpc::ServerContextBase& context);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_WATCH_LIMITER_H_
