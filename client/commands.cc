// The CLI's public entry points: exit codes, job id arguments, and the dispatch of an
// Invocation to its command (command_set.h; one file per group of commands).
#include "client/commands.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/command_set.h"
#include "client/sample.h"
#include "common/job_paths.h"
#include "common/version.h"

namespace dtrain {
namespace client {

absl::StatusOr<int32_t> ParsePriority(absl::string_view text) {
  int32_t priority = 0;
  if (!absl::SimpleAtoi(text, &priority)) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority '", text, "' is not a whole number (-100..100)"));
  }
  return priority;
}

std::optional<std::string> JobIdFromArgument(const std::string& arg) {
  int64_t number = 0;
  // "job-12" is job-000012: the coordinator knows each job by its one spelling (JobNumberOf).
  if (IsJobId(arg)) {
    const std::optional<int64_t> spelled = JobNumberIn(arg);
    return spelled.has_value() ? JobIdFor(*spelled) : arg;
  }
  if (!arg.empty() && std::all_of(arg.begin(), arg.end(), absl::ascii_isdigit) &&
      absl::SimpleAtoi(arg, &number) && number > 0) {
    return JobIdFor(number);
  }
  return std::nullopt;
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    default:
      return kExitOtherError;
  }
}

int ExitCodeForJob(JobState state) {
  switch (state) {
    case SUCCEEDED:
      return kExitOk;
    case CANCELLED:
      return kExitJobCancelled;
    default:
      return kExitJobFailed;
  }
}

int RunWithoutCoordinator(const Invocation& inv, Output& output) {
  if (inv.help) {
    output.out << (inv.args.empty() ? Usage() : CommandUsage(inv.args[0]));
    return kExitOk;
  }
  if (inv.version) {
    output.out << VersionText("dtrain") << "\n";
    return kExitOk;
  }
  if (inv.command == "plan") return command::PlanJob(inv, output);
  if (inv.command == "export") return command::Export(inv, output);
  if (inv.command == "certs") return command::Certs(inv, output);
  if (inv.command == "data") return command::DataPrepare(inv, output);
  if (inv.command == "sample") return RunSampler(inv.args[0], inv, output.err);
  output.err << "dtrain: '" << inv.command << "' needs the coordinator\n";
  return kExitUsage;
}

int RunInvocation(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  if (!NeedsCoordinator(inv)) return RunWithoutCoordinator(inv, output);
  if (inv.command == "submit") return command::Submit(inv, stub, output);
  if (inv.command == "resubmit") return command::Resubmit(inv, stub, output);
  if (inv.command == "status") return command::ShowStatus(inv, stub, output);
  if (inv.command == "list") return command::List(inv, stub, output);
  if (inv.command == "watch") return command::Watch(inv, stub, output);
  if (inv.command == "cancel") return command::Cancel(inv, stub, output);
  if (inv.command == "delete") return command::Delete(inv, stub, output);
  if (inv.command == "logs") return command::Logs(inv, stub, output);
  if (inv.command == "checkpoints") return command::Checkpoints(inv, stub, output);
  if (inv.command == "diagnose") return command::Diagnose(inv, stub, output);
  if (inv.command == "trace") return command::Trace(inv, stub, output);
  if (inv.command == "rebalance") return command::Rebalance(inv, stub, output);
  if (inv.command == "checkpoint") return command::CheckpointNow(inv, stub, output);
  if (inv.command == "priority") return command::Priority(inv, stub, output);
  if (inv.command == "workers") return command::Workers(inv, stub, output);
  if (inv.command == "sample") return command::SampleJob(inv, stub, output);
  if (inv.command == "export-metrics") return command::ExportMetrics(inv, stub, output);
  output.err << "dtrain: unknown command '" << inv.command << "'\n";
  return kExitUsage;
}

}  // namespace client
}  // namespace dtrain
