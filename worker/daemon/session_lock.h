// SessionLock: this host's proof that the previous process of a worker is dead, so that a
// worker killed and restarted at once (kill -9, an OOM kill, systemd's Restart=on-failure) is
// accepted by the coordinator within a second instead of being refused until the dead
// session's lease runs out ("held by another live session").
//
// <data_root>/.worker-<worker id>.session holds the session id of the process running as that
// worker with that data root, and that process holds an exclusive flock(2) on it while it
// lives; the kernel releases the lock when the process dies, however it dies. A new process
// that takes the lock knows that the session it finds written there is dead: it says so at
// registration (RegisterWorkerRequest.previous_session_id) and the coordinator hands it the
// worker id at once, the dead session's rank counted as lost. A second live process with the
// same --worker_id and --data_root cannot take the lock: it waits a while (the holder may be
// the previous process still stopping: a worker stopped by SIGTERM delivers its last reports
// for up to 10 s) and then stops, saying so. Two
// processes with the same id on different hosts (or data roots) prove nothing to each other:
// the coordinator still refuses the second while the first's lease lasts.
#ifndef DTRAIN_WORKER_DAEMON_SESSION_LOCK_H_
#define DTRAIN_WORKER_DAEMON_SESSION_LOCK_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dtrain::worker {

class SessionLock {
 public:
  // Takes the lock of `worker_id` in `dir` (which exists) and writes `session_id` into it.
  // While another live process holds it, tries again every 100 ms for up to `wait`, calling
  // `waiting` once (when set) with the reason; then FailedPrecondition. The file's I/O errors
  // otherwise.
  static absl::StatusOr<SessionLock> Claim(
      const std::string& dir, const std::string& worker_id, const std::string& session_id,
      absl::Duration wait = absl::ZeroDuration(),
      const std::function<void(const std::string&)>& waiting = nullptr);

  SessionLock(SessionLock&& other) noexcept;
  SessionLock& operator=(SessionLock&& other) = delete;
  SessionLock(const SessionLock&) = delete;
  ~SessionLock();  // releases the lock (the file stays, naming this session)

  // The session of the process that held the lock before, now dead ("" when none).
  const std::string& previous_session() const { return previous_; }
  const std::string& path() const { return path_; }

 private:
  SessionLock(int fd, std::string path, std::string previous)
      : fd_(fd), path_(std::move(path)), previous_(std::move(previous)) {}
  int fd_ = -1;
  std::string path_;
  std::string previous_;
};

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_SESSION_LOCK_H_
