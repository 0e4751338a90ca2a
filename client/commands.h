// The dtrain CLI's commands. main() parses the arguments (arguments.h), connects a
// CoordinatorStub when the command needs one and runs the command; everything else lives here so
// tests can drive it.
//
//   absl::StatusOr<Invocation> inv = ParseArguments({"status", "job-000003", "--json"}, nullptr);
//   int exit_code = RunInvocation(*inv, *stub, output);
//
// Exit codes are a contract for scripts (README.md, client/README.md):
//   0 success; for `watch` and `submit --watch`: the job SUCCEEDED
//   1 the job FAILED
//   2 usage or bad input: bad flag or arguments, unreadable file, INVALID_ARGUMENT
//   3 the coordinator is unreachable: UNAVAILABLE or DEADLINE_EXCEEDED
//   4 not found: NOT_FOUND (unknown job id)
//   5 the job was CANCELLED
//   6 any other error from the coordinator (FAILED_PRECONDITION, INTERNAL, ...)
//   130 interrupted (Ctrl-C) while watching: the job keeps running
#ifndef DTRAIN_CLIENT_COMMANDS_H_
#define DTRAIN_CLIENT_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/arguments.h"
#include "client/coordinator_stub.h"

namespace dtrain {
namespace client {

enum ExitCode : int {
  kExitOk = 0,
  kExitJobFailed = 1,
  kExitUsage = 2,
  kExitUnreachable = 3,
  kExitNotFound = 4,
  kExitJobCancelled = 5,
  kExitOtherError = 6,
  kExitInterrupted = 130,  // 128 + SIGINT, as a shell reports it
};

// The job id an argument names without asking the coordinator: "job-000012" as is, "12" ->
// "job-000012"; nullopt for anything else (a job name, resolved through ListJobs).
std::optional<std::string> JobIdFromArgument(const std::string& arg);

// A job priority as typed (`dtrain priority JOB N`, the console's priority field): a whole
// number; the coordinator checks its range. InvalidArgument "priority 'x' is not a whole number
// (-100..100)".
absl::StatusOr<int32_t> ParsePriority(absl::string_view text);

// Where commands write: results to `out`, diagnostics to `err`; `submit -` reads `in`. `tty`
// selects the in-place progress line of watch (\r redraws) over one line per update.
// `on_watch`, when set, is called with the job id when a watch starts following it (main arms
// its Ctrl-C note there).
struct Output {
  std::ostream& out;
  std::ostream& err;
  bool tty = false;
  std::istream* in = nullptr;
  std::function<void(const std::string& job_id)> on_watch;
};

// Runs the command against the coordinator; returns the exit code. Commands that need no
// coordinator (NeedsCoordinator false: help, version, plan, export) never call it.
int RunInvocation(const Invocation& invocation, CoordinatorStub& stub, Output& output);

// Runs a command that needs no coordinator (NeedsCoordinator false); main() calls it without
// building a channel. Exit code 2 for a command that needs one.
int RunWithoutCoordinator(const Invocation& invocation, Output& output);

// The exit code for a failed call: 2 INVALID_ARGUMENT, 3 UNAVAILABLE / DEADLINE_EXCEEDED,
// 4 NOT_FOUND, 6 otherwise (0 for OK).
int ExitCodeFor(const absl::Status& status);

// The exit code for a job that ended in `state`: 0 SUCCEEDED, 1 FAILED, 5 CANCELLED.
int ExitCodeForJob(JobState state);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_COMMANDS_H_
