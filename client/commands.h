// The dtrain CLI's command line and commands. main() parses the arguments, connects a
// CoordinatorStub and runs the command; everything else lives here so tests can drive it.
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

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";
inline constexpr char kCoordinatorEnv[] = "DTRAIN_COORDINATOR";

// One parsed command line.
struct Invocation {
  std::string command;            // submit, resubmit, plan, status, list, watch, cancel, logs,
                                  // checkpoints, workers, export, help
  std::vector<std::string> args;  // its positional arguments (status and cancel: several ids)
  bool help = false;              // --help, or the help command
  // Global flags.
  std::string coordinator;        // --coordinator, else $DTRAIN_COORDINATOR, else the default
  bool json = false;              // --json
  absl::Duration timeout = absl::Seconds(10);        // --timeout
  absl::Duration reconnect_for = absl::Seconds(60);  // --reconnect_for
  // Command flags.
  bool watch = false;   // submit/resubmit --watch
  bool quiet = false;   // watch, submit/resubmit --watch: state changes and the summary only
  int every = 1;        // watch, submit/resubmit --watch: a step line every N steps (>= 1)
  int limit = 0;        // list --limit
  std::vector<JobState> states;  // list --state=RUNNING,QUEUED (empty: every state)
  std::string reason;   // cancel --reason
  int workers = 0;      // plan --workers (0: dp*pp*tp)
  int hosts = 1;        // plan --hosts (>= 1)
  bool resume = false;  // resubmit --resume: resume_from = the job
  int64_t steps = 0;    // resubmit --steps (0: the job's own)
  std::optional<int> rank;  // logs --rank (unset: every rank and the coordinator)
  bool follow = false;  // logs --follow
  std::string forget;   // workers --forget=ID
};

// Parses the arguments after argv[0]. Flags (--name=value, --name value, --bool, --nobool;
// one or two dashes) may appear anywhere; "--" ends them. `env_coordinator` is the value of
// $DTRAIN_COORDINATOR or null. INVALID_ARGUMENT, naming the flag or argument, for: unknown
// flags, bad values, a command flag on another command, a missing or extra argument, an unknown
// command, no command.
absl::StatusOr<Invocation> ParseArguments(const std::vector<std::string>& args,
                                          const char* env_coordinator);

// The usage text (`dtrain help`).
std::string Usage();

// The job id an argument names without asking the coordinator: "job-000012" as is, "12" ->
// "job-000012"; nullopt for anything else (a job name, resolved through ListJobs).
std::optional<std::string> JobIdFromArgument(const std::string& arg);

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

// Runs the command against the coordinator (`plan` and `help` never call it); returns the exit
// code.
int RunInvocation(const Invocation& invocation, CoordinatorStub& stub, Output& output);

// The exit code for a failed call: 2 INVALID_ARGUMENT, 3 UNAVAILABLE / DEADLINE_EXCEEDED,
// 4 NOT_FOUND, 6 otherwise (0 for OK).
int ExitCodeFor(const absl::Status& status);

// The exit code for a job that ended in `state`: 0 SUCCEEDED, 1 FAILED, 5 CANCELLED.
int ExitCodeForJob(JobState state);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_COMMANDS_H_
