// Helpers shared by the coordinator's tests.
#ifndef DTRAIN_COORDINATOR_TEST_UTIL_H_
#define DTRAIN_COORDINATOR_TEST_UTIL_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dtrain::coordinator {

// A valid one-worker job spec: 2 layers, 3 steps; a failure fails it (max_restarts 0: the
// recoveries have their own tests, recovery_test.cc).
inline constexpr const char* kTinySpec = R"({
  "name": "tiny", "dataset": "/data/tiny.bin", "steps": 3, "batch_size": 4,
  "fault_tolerance": {"max_restarts": 0},
  "model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 2, "n_embd": 32}})";

// A fresh SQLite path under TEST_TMPDIR (any leftover database and WAL files removed).
inline std::string TempDb(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, "-", getpid(), ".db");
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  return path;
}

// A client context with a deadline: every call in a test gets one.
inline std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration timeout = absl::Seconds(5)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

// Polls `done` every 10ms for at most `timeout`; its last answer.
template <typename F>
bool WaitFor(F done, absl::Duration timeout = absl::Seconds(5)) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_TEST_UTIL_H_
