#include "client/commands.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/format.h"
#include "client/plan.h"
#include "coordinator/job_spec.h"
#include "worker/parallel/sharded_checkpoint.h"

// The CLI's flags. Defined with absl so they parse and print like every dtrain binary's, but
// ParseArguments (not absl::ParseCommandLine) reads the command line: exit codes stay ours.
ABSL_FLAG(std::string, coordinator, "",
          "host:port of the coordinator (default $DTRAIN_COORDINATOR, else 127.0.0.1:7070)");
ABSL_FLAG(bool, json, false, "machine-readable output: one JSON object per line");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "deadline of every call");
ABSL_FLAG(absl::Duration, reconnect_for, absl::Seconds(60),
          "watch: how long to keep reconnecting when the coordinator goes away");
ABSL_FLAG(bool, watch, false, "submit: follow the job to its end");
ABSL_FLAG(int, limit, 0, "list: at most this many jobs (0: the coordinator's default, 100)");
ABSL_FLAG(std::string, reason, "", "cancel: why, recorded in the job's history");
ABSL_FLAG(int, workers, 0, "plan: hypothetical workers (0: dp*pp*tp)");
ABSL_FLAG(int, hosts, 1, "plan: hosts the hypothetical workers are spread over");

namespace dtrain {
namespace client {
namespace {

struct FlagRule {
  bool is_bool;
  std::string only_for;  // the command it belongs to; empty: global
};

const std::map<std::string, FlagRule>& FlagRules() {
  static const auto* rules = new std::map<std::string, FlagRule>{
      {"coordinator", {false, ""}},   {"json", {true, ""}},         {"timeout", {false, ""}},
      {"reconnect_for", {false, ""}}, {"watch", {true, "submit"}},  {"limit", {false, "list"}},
      {"reason", {false, "cancel"}},  {"workers", {false, "plan"}}, {"hosts", {false, "plan"}},
  };
  return *rules;
}

// Positional arguments of each command: {min, max}.
const std::map<std::string, std::pair<int, int>>& Commands() {
  static const auto* commands = new std::map<std::string, std::pair<int, int>>{
      {"submit", {1, 1}}, {"plan", {1, 1}},   {"status", {1, 1}},  {"list", {0, 0}},
      {"watch", {1, 1}},  {"cancel", {1, 1}}, {"workers", {0, 0}}, {"help", {0, 1}},
      {"export", {2, 2}},
  };
  return *commands;
}

void ResetFlags() {
  absl::SetFlag(&FLAGS_coordinator, "");
  absl::SetFlag(&FLAGS_json, false);
  absl::SetFlag(&FLAGS_timeout, absl::Seconds(10));
  absl::SetFlag(&FLAGS_reconnect_for, absl::Seconds(60));
  absl::SetFlag(&FLAGS_watch, false);
  absl::SetFlag(&FLAGS_limit, 0);
  absl::SetFlag(&FLAGS_reason, "");
  absl::SetFlag(&FLAGS_workers, 0);
  absl::SetFlag(&FLAGS_hosts, 1);
}

// Prints a failed call and returns its exit code.
int Fail(const absl::Status& status, const Invocation& inv, Output& output) {
  const int code = ExitCodeFor(status);
  if (code == kExitUnreachable) {
    output.err << "dtrain: cannot reach the coordinator at " << inv.coordinator << ": "
               << status.message() << "\n"
               << "dtrain: is it running? Point --coordinator=HOST:PORT or $" << kCoordinatorEnv
               << " at it.\n";
  } else {
    output.err << "dtrain: " << absl::StatusCodeToString(status.code()) << ": "
               << status.message() << "\n";
  }
  return code;
}

// Follows a job to its end, printing progress; returns the exit code for its final state.
class Watcher {
 public:
  Watcher(const Invocation& inv, Output& output) : inv_(inv), output_(output) {}

  int Run(CoordinatorStub& stub, const std::string& job_id) {
    WatchCallbacks callbacks;
    callbacks.on_update = [this](const JobUpdate& u) { OnUpdate(u); };
    callbacks.on_stream_start = [this] { events_in_stream_ = 0; };
    callbacks.on_reconnecting = [this](const absl::Status& why) {
      EndProgressLine();
      output_.err << "dtrain: lost the watch stream (" << why.message()
                  << "); reconnecting for up to " << absl::FormatDuration(inv_.reconnect_for)
                  << "\n";
    };
    callbacks.on_reconnected = [this] {
      EndProgressLine();
      output_.err << "dtrain: reconnected to " << inv_.coordinator << "\n";
    };
    const absl::Status status = stub.WatchJob(job_id, /*after_step=*/0, callbacks);
    EndProgressLine();
    if (!status.ok()) return Fail(status, inv_, output_);
    if (!inv_.json) output_.out << SummaryLine(job_, first_loss_) << "\n";
    output_.out.flush();
    return ExitCodeForJob(job_.state());
  }

 private:
  void OnUpdate(const JobUpdate& u) {
    job_ = u.job();
    if (u.has_step() && !first_loss_.has_value()) first_loss_ = u.step().loss();
    if (u.has_step()) rate_.Add(u.step());
    // Every stream replays the history and the events: print each once, in both modes.
    if (u.has_state_change()) {
      const StateChange& c = u.state_change();
      const std::string key = absl::StrCat(c.state(), "|", c.time_unix_ms(), "|", c.reason());
      if (!seen_changes_.insert(key).second) return;
    } else if (u.update_case() == JobUpdate::kEvent) {
      if (++events_in_stream_ <= events_printed_) return;
      ++events_printed_;
    }
    if (inv_.json) {
      output_.out << ToJsonLine(u) << "\n";
      output_.out.flush();
      return;
    }
    if (u.has_state_change()) {
      PrintLine(StateChangeLine(job_.id(), u.state_change()));
    } else if (u.has_step()) {
      Job shown = job_;
      *shown.mutable_latest() = u.step();
      shown.set_state(RUNNING);  // steps are reported while running, also when replayed
      const std::string line = ProgressLine(shown, rate_.EtaSeconds(job_.spec()));
      if (output_.tty) {
        output_.out << "\r" << line << "\x1b[K";
        progress_open_ = true;
      } else {
        output_.out << line << "\n";
      }
      output_.out.flush();
    } else if (u.update_case() == JobUpdate::kEvent) {
      PrintLine(absl::StrCat(job_.id(), " event: ", u.event()));
    }
  }

  // Prints a whole line, moving past an in-place progress line first.
  void PrintLine(const std::string& line) {
    EndProgressLine();
    output_.out << line << "\n";
    output_.out.flush();
  }

  void EndProgressLine() {
    if (progress_open_) {
      output_.out << "\n";
      output_.out.flush();
      progress_open_ = false;
    }
  }

  const Invocation& inv_;
  Output& output_;
  Job job_;
  std::optional<double> first_loss_;
  StepRate rate_;
  std::set<std::string> seen_changes_;
  int64_t events_in_stream_ = 0;  // events the current stream has sent
  int64_t events_printed_ = 0;
  bool progress_open_ = false;
};

// The text of a spec file; nullopt after printing why it cannot be read.
std::optional<std::string> ReadSpecFile(const std::string& path, Output& output) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  if (file) contents << file.rdbuf();
  if (!file || file.bad()) {
    output.err << "dtrain: cannot read " << path << ": " << std::strerror(errno) << "\n";
    return std::nullopt;
  }
  return contents.str();
}

int Submit(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  const std::string& path = inv.args[0];
  const std::optional<std::string> contents = ReadSpecFile(path, output);
  if (!contents.has_value()) return kExitUsage;
  absl::StatusOr<Job> job = stub.SubmitJob(*contents);
  if (!job.ok()) {
    if (job.status().code() == absl::StatusCode::kInvalidArgument) {
      output.err << "dtrain: the coordinator rejected " << path << ":\n";
      absl::string_view message = job.status().message();
      absl::ConsumePrefix(&message, "SubmitJob: ");
      for (const std::string& problem : SplitProblems(std::string(message))) {
        output.err << "  " << problem << "\n";
      }
      return kExitUsage;
    }
    return Fail(job.status(), inv, output);
  }
  if (inv.json) {
    output.out << ToJsonLine(*job) << "\n";
  } else {
    output.out << "submitted " << job->id()
               << (job->spec().name().empty() ? "" : absl::StrCat(" (", job->spec().name(), ")"))
               << ": " << ProgressLine(*job, std::nullopt).substr(job->id().size() + 1) << "\n";
  }
  output.out.flush();
  if (!inv.watch) return kExitOk;
  return Watcher(inv, output).Run(stub, job->id());
}

// `export`: the shards of a complete checkpoint step (its manifest) into one safetensors file.
int Export(const Invocation& inv, Output& output) {
  const absl::Status s = parallel::ExportSafetensors(inv.args[0], inv.args[1]);
  if (!s.ok()) {
    output.err << "dtrain: export failed: " << s.message() << "\n";
    switch (s.code()) {
      case absl::StatusCode::kNotFound:
        return kExitNotFound;
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kDataLoss:
        return kExitUsage;  // not a complete, intact checkpoint
      default:
        return kExitOtherError;
    }
  }
  output.out << "exported " << inv.args[0] << " to " << inv.args[1] << "\n";
  return kExitOk;
}

// `plan`: the coordinator's own validation and placement, then the schedule simulated; no call.
int PlanJob(const Invocation& inv, Output& output) {
  const std::string& path = inv.args[0];
  const std::optional<std::string> contents = ReadSpecFile(path, output);
  if (!contents.has_value()) return kExitUsage;
  absl::StatusOr<JobSpec> spec = coordinator::ParseAndValidateJobSpecJson(*contents);
  if (!spec.ok()) {
    output.err << "dtrain: " << path << " is not a valid job spec:\n";
    absl::string_view message = spec.status().message();
    absl::ConsumePrefix(&message, "invalid job spec: ");
    for (const std::string& problem : SplitProblems(std::string(message))) {
      output.err << "  " << problem << "\n";
    }
    return kExitUsage;
  }
  PlanOptions options;
  options.workers = inv.workers;
  options.hosts = inv.hosts;
  absl::StatusOr<Plan> plan = MakePlan(*spec, options);
  if (!plan.ok()) {
    // Whatever the code (a schedule the layout cannot run, too few workers, a deadlock), the
    // input is what must change.
    output.err << "dtrain: " << path << " cannot run: " << plan.status().message() << "\n";
    return kExitUsage;
  }
  output.out << (inv.json ? PlanJson(*plan, path) + "\n" : PlanText(*plan, path));
  return kExitOk;
}

int ShowStatus(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<Job> job = stub.GetJob(inv.args[0]);
  if (!job.ok()) return Fail(job.status(), inv, output);
  output.out << (inv.json ? ToJsonLine(*job) + "\n" : JobDetail(*job, absl::Now()));
  return kExitOk;
}

int List(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<ListJobsResponse> jobs = stub.ListJobs(inv.limit);
  if (!jobs.ok()) return Fail(jobs.status(), inv, output);
  if (inv.json) {
    output.out << ToJsonLine(*jobs) << "\n";
  } else if (jobs->jobs_size() == 0) {
    output.out << "no jobs\n";
  } else {
    output.out << JobsTable(*jobs, absl::Now());
  }
  return kExitOk;
}

int Cancel(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<Job> job = stub.CancelJob(inv.args[0], inv.reason);
  if (!job.ok()) return Fail(job.status(), inv, output);
  output.out << (inv.json ? ToJsonLine(*job) : ProgressLine(*job, std::nullopt)) << "\n";
  return kExitOk;
}

int Workers(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<ListWorkersResponse> workers = stub.ListWorkers();
  if (!workers.ok()) return Fail(workers.status(), inv, output);
  if (inv.json) {
    output.out << ToJsonLine(*workers) << "\n";
  } else if (workers->workers_size() == 0) {
    output.out << "no workers registered\n";
  } else {
    output.out << WorkersTable(*workers, absl::Now());
  }
  return kExitOk;
}

}  // namespace

absl::StatusOr<Invocation> ParseArguments(const std::vector<std::string>& args,
                                          const char* env_coordinator) {
  ResetFlags();
  Invocation inv;
  std::vector<std::string> positional;
  std::set<std::string> set_flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    absl::string_view body = arg;
    if (!absl::ConsumePrefix(&body, "--")) absl::ConsumePrefix(&body, "-");
    const size_t eq = body.find('=');
    std::string name(body.substr(0, eq));
    std::optional<std::string> value;
    if (eq != absl::string_view::npos) value = std::string(body.substr(eq + 1));
    if (name == "help" || name == "h") {
      inv.help = true;
      continue;
    }
    auto rule = FlagRules().find(name);
    if (rule == FlagRules().end() && absl::StartsWith(name, "no") && !value.has_value()) {
      auto negated = FlagRules().find(name.substr(2));
      if (negated != FlagRules().end() && negated->second.is_bool) {
        rule = negated;
        name = name.substr(2);
        value = "false";
      }
    }
    if (rule == FlagRules().end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
    }
    if (!value.has_value()) {
      if (rule->second.is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string error;
    if (flag == nullptr || !flag->ParseFrom(*value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value for --", name, ": '", *value, "'",
                       error.empty() ? "" : absl::StrCat(" (", error, ")")));
    }
    set_flags.insert(name);
  }

  if (positional.empty()) {
    if (inv.help) {
      inv.command = "help";
      return inv;
    }
    return absl::InvalidArgumentError("no command given");
  }
  inv.command = positional[0];
  inv.args.assign(positional.begin() + 1, positional.end());
  auto command = Commands().find(inv.command);
  if (command == Commands().end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown command '", inv.command, "'"));
  }
  if (inv.command == "help") inv.help = true;
  if (inv.help) return inv;  // `dtrain watch --help`: the usage, whatever else is missing
  const auto [min_args, max_args] = command->second;
  if (static_cast<int>(inv.args.size()) < min_args) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", inv.command, "' needs ",
        inv.command == "submit" || inv.command == "plan" ? "a job spec file"
        : inv.command == "export" ? "a checkpoint directory and an output file"
                                  : "a job id"));
  }
  if (static_cast<int>(inv.args.size()) > max_args) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", inv.args[max_args], "' for '", inv.command, "'"));
  }
  for (const std::string& name : set_flags) {
    const std::string& only_for = FlagRules().at(name).only_for;
    if (!only_for.empty() && only_for != inv.command) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " applies to '", only_for, "' only"));
    }
  }

  inv.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (inv.coordinator.empty() && env_coordinator != nullptr) inv.coordinator = env_coordinator;
  if (inv.coordinator.empty()) inv.coordinator = kDefaultCoordinator;
  inv.json = absl::GetFlag(FLAGS_json);
  inv.timeout = absl::GetFlag(FLAGS_timeout);
  inv.reconnect_for = absl::GetFlag(FLAGS_reconnect_for);
  inv.watch = absl::GetFlag(FLAGS_watch);
  inv.limit = absl::GetFlag(FLAGS_limit);
  inv.reason = absl::GetFlag(FLAGS_reason);
  inv.workers = absl::GetFlag(FLAGS_workers);
  inv.hosts = absl::GetFlag(FLAGS_hosts);
  if (inv.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  if (inv.reconnect_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--reconnect_for must not be negative");
  }
  if (inv.limit < 0) return absl::InvalidArgumentError("--limit must not be negative");
  if (inv.workers < 0) return absl::InvalidArgumentError("--workers must not be negative");
  if (inv.hosts < 1) return absl::InvalidArgumentError("--hosts must be at least 1");
  return inv;
}

std::string Usage() {
  return R"(dtrain: the command line of the dtrain training service.

usage: dtrain [flags] COMMAND [ARGS]

commands:
  submit JOB.json [--watch]      queue a job (the coordinator validates the spec and lists
                                 every problem); --watch then follows it like `watch`
  plan JOB.json [--workers=N] [--hosts=H]
                                 without a coordinator: validate the spec, place it on N
                                 hypothetical workers (default dp*pp*tp) over H hosts, simulate
                                 one step of its pipeline schedule (timeline, bubble, memory)
  status JOB_ID                  state, progress, placement and history of a job
  list [--limit=N]               jobs, newest first
  watch JOB_ID                   a live progress line until the job ends, then a summary
  cancel JOB_ID [--reason=TEXT]  stop a queued or running job
  workers                        registered workers, their jobs and heartbeats
  export CHECKPOINT OUT.safetensors
                                 without a coordinator: assemble a multi-worker job's sharded
                                 checkpoint (its directory, using `latest`, or one step_N
                                 directory) into one GPT-2 safetensors file
  help                           this text

flags (anywhere on the line):
  --coordinator=HOST:PORT  the coordinator (default $DTRAIN_COORDINATOR, else 127.0.0.1:7070)
  --json                   machine-readable output, one JSON object per line (protobuf's JSON
                           mapping with proto field names; watch: one JobUpdate per line)
  --timeout=10s            deadline of every call
  --reconnect_for=60s      watch: how long to keep reconnecting when the coordinator goes away

exit status:
  0  success; for watch and submit --watch: the job SUCCEEDED
  1  the job FAILED
  2  usage or bad input: bad flag, unreadable file, spec rejected (INVALID_ARGUMENT);
     plan: a spec or schedule that cannot run
  3  the coordinator is unreachable (UNAVAILABLE, DEADLINE_EXCEEDED)
  4  not found (unknown job id)
  5  the job was CANCELLED
  6  any other error from the coordinator (e.g. cancelling a job that already ended)
)";
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

int RunInvocation(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  if (inv.help) {
    output.out << Usage();
    return kExitOk;
  }
  if (inv.command == "submit") return Submit(inv, stub, output);
  if (inv.command == "plan") return PlanJob(inv, output);
  if (inv.command == "status") return ShowStatus(inv, stub, output);
  if (inv.command == "list") return List(inv, stub, output);
  if (inv.command == "watch") return Watcher(inv, output).Run(stub, inv.args[0]);
  if (inv.command == "cancel") return Cancel(inv, stub, output);
  if (inv.command == "workers") return Workers(inv, stub, output);
  if (inv.command == "export") return Export(inv, output);
  output.err << "dtrain: unknown command '" << inv.command << "'\n";
  return kExitUsage;
}

}  // namespace client
}  // namespace dtrain
