// The CLI's commands, one function each, and what they share; internal to //client:commands.
// RunInvocation and RunWithoutCoordinator (commands.h) dispatch to them by Invocation.command.
// Each returns the command's exit code (commands.h's ExitCode) after printing to `output`.
#ifndef DTRAIN_CLIENT_COMMAND_SET_H_
#define DTRAIN_CLIENT_COMMAND_SET_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/arguments.h"
#include "client/commands.h"
#include "client/coordinator_stub.h"

namespace dtrain::client::command {

// What the commands share (command_common.cc).
// Prints a failed call (why the coordinator cannot be reached, when it cannot) and returns its
// exit code.
int Fail(const absl::Status& status, const Invocation& inv, Output& output);
// A NOT_FOUND about a job, with where to look: "...; the newest is job-000012 (dtrain list)".
absl::Status WithNewestJobHint(CoordinatorStub& stub, const absl::Status& status);
// The job id `arg` names: an id or a number (JobIdFromArgument), else the one job of that name
// (the coordinator's name index: found whatever its age). NOT_FOUND (with the newest id) for no
// such job; INVALID_ARGUMENT listing (the newest 10 of) them when several jobs have the name.
absl::StatusOr<std::string> ResolveJobId(CoordinatorStub& stub, const std::string& arg);
// Runs `each` for every job id argument, resolved; returns the first failure's exit code (every
// argument is still tried).
int ForEachJob(const Invocation& inv, CoordinatorStub& stub, Output& output,
               const std::function<int(const std::string& job_id)>& each);
// The text of a spec file (`-`: standard input); nullopt after printing why it cannot be used:
// missing or unreadable, a directory, larger than 16 MiB, or empty.
std::optional<std::string> ReadSpecFile(const std::string& path, Output& output);

// Follows a job to its end, printing progress; returns the exit code for its final state
// (watcher.cc).
int WatchToEnd(const Invocation& inv, Output& output, CoordinatorStub& stub,
               const std::string& job_id);

// Jobs (commands_jobs.cc).
int Submit(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Resubmit(const Invocation& inv, CoordinatorStub& stub, Output& output);
int ShowStatus(const Invocation& inv, CoordinatorStub& stub, Output& output);
int List(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Watch(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Cancel(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Delete(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Logs(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Checkpoints(const Invocation& inv, CoordinatorStub& stub, Output& output);
int ExportMetrics(const Invocation& inv, CoordinatorStub& stub, Output& output);
int SampleJob(const Invocation& inv, CoordinatorStub& stub, Output& output);

// A running job and the cluster (commands_control.cc).
int Diagnose(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Rebalance(const Invocation& inv, CoordinatorStub& stub, Output& output);
int CheckpointNow(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Priority(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Trace(const Invocation& inv, CoordinatorStub& stub, Output& output);
int Workers(const Invocation& inv, CoordinatorStub& stub, Output& output);

// No coordinator (commands_offline.cc).
int PlanJob(const Invocation& inv, Output& output);
int Export(const Invocation& inv, Output& output);
int Certs(const Invocation& inv, Output& output);
int DataPrepare(const Invocation& inv, Output& output);

}  // namespace dtrain::client::command

#endif  // DTRAIN_CLIENT_COMMAND_SET_H_
