#include "client/commands.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/certs.h"
#include "client/data_prepare.h"
#include "client/export_metrics.h"
#include "client/format.h"
#include "client/plan.h"
#include "client/sample.h"
#include "client/trace.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "common/tls_probe.h"
#include "common/version.h"
#include "plan/dir_removal_text.h"
#include "plan/job_plan.h"
#include "worker/parallel/checkpoint_export.h"
#include "worker/parallel/manifest.h"

namespace dtrain {
namespace client {
namespace {

// Prints a failed call and returns its exit code.
int Fail(const absl::Status& status, const Invocation& inv, Output& output) {
  const int code = ExitCodeFor(status);
  if (status.code() == absl::StatusCode::kDeadlineExceeded &&
      AcceptsConnections(inv.coordinator, std::min(inv.timeout, absl::Milliseconds(500)))) {
    // Its kernel accepts connections, its process answered nothing within --timeout (hung,
    // paused, overloaded): no TLS probe, which would wait as long again for a handshake.
    output.err << "dtrain: " << NoAnswerWithin(inv.coordinator, inv.timeout) << "\n";
    return code;
  }
  if (code == kExitUnreachable) {
    // A handshake the coordinator refused reads "Socket closed"; say which side refused whom.
    const std::string why =
        DiagnoseTlsFailure(inv.coordinator, TlsFilesOf(inv, std::getenv), inv.timeout);
    if (!why.empty()) {
      output.err << "dtrain: cannot reach the coordinator at " << inv.coordinator << ": " << why
                 << "\n";
      return code;
    }
    output.err << "dtrain: cannot reach the coordinator at " << inv.coordinator << ": "
               << status.message() << "\n"
               << "dtrain: is it running? Point --coordinator=HOST:PORT or $" << kCoordinatorEnv
               << " at it.\n";
  } else {
    output.err << "dtrain: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
               << "\n";
  }
  return code;
}

// A NOT_FOUND about a job, with where to look: "...; the newest is job-000012 (dtrain list)".
absl::Status WithNewestJobHint(CoordinatorStub& stub, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kNotFound) return status;
  absl::StatusOr<ListJobsResponse> newest = stub.ListJobs(1);
  if (!newest.ok()) return status;
  const std::string hint =
      newest->jobs_size() == 0
          ? "there are no jobs yet"
          : absl::StrCat("the newest is ", newest->jobs(0).id(), " (dtrain list)");
  return absl::NotFoundError(absl::StrCat(status.message(), "; ", hint));
}

// The job id `arg` names: an id or a number (JobIdFromArgument), else the one job of that name
// (the coordinator's name index: found whatever its age). NOT_FOUND (with the newest id) for no
// such job; INVALID_ARGUMENT listing (the newest 10 of) them when several jobs have the name.
absl::StatusOr<std::string> ResolveJobId(CoordinatorStub& stub, const std::string& arg) {
  if (std::optional<std::string> id = JobIdFromArgument(arg)) return *id;
  ListJobsRequest request;
  request.set_name(arg);
  request.set_limit(10);
  ASSIGN_OR_RETURN(ListJobsResponse jobs, stub.ListJobs(request));
  std::vector<std::string> matches;
  for (const Job& job : jobs.jobs()) {
    matches.push_back(absl::StrCat(job.id(), " (", JobStateName(job.state()), ")"));
  }
  if (!jobs.next_page_token().empty()) matches.push_back("and more");
  if (matches.size() == 1) return matches[0].substr(0, matches[0].find(' '));
  if (matches.empty()) {
    return WithNewestJobHint(
        stub, absl::NotFoundError(absl::StrCat("no job with the id or name '", arg, "'")));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", arg, "' names ",
                   jobs.next_page_token().empty() ? absl::StrCat(matches.size()) : "more than 10",
                   " jobs: ", absl::StrJoin(matches, ", "), "; give one of their ids"));
}

// Follows a job to its end, printing progress; returns the exit code for its final state.
// Text mode prints each state change once and the final state only in the summary; --quiet
// leaves out steps and events, --every=N prints every Nth step (and the last).
class Watcher {
 public:
  Watcher(const Invocation& inv, Output& output) : inv_(inv), output_(output) {}

  int Run(CoordinatorStub& stub, const std::string& job_id) {
    if (output_.on_watch) output_.on_watch(job_id);
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
    absl::StatusOr<int64_t> after_step = ReplayAfter(stub, job_id);
    if (!after_step.ok()) return Fail(WithNewestJobHint(stub, after_step.status()), inv_, output_);
    const absl::Status status = stub.WatchJob(job_id, *after_step, callbacks);
    EndProgressLine();
    if (!status.ok()) return Fail(WithNewestJobHint(stub, status), inv_, output_);
    if (!inv_.json) output_.out << SummaryLine(job_, first_loss_) << "\n";
    output_.out.flush();
    return ExitCodeForJob(job_.state());
  }

 private:
  // Past this many steps a watch that would only redraw one progress line (a terminal) or print
  // none (--quiet) starts at the newest step instead of replaying them all: a month-long job's
  // 3,000,000 steps took 27-39 s to replay before anything live showed.
  static constexpr int64_t kReplayedSteps = 10000;

  // The step after which the watch replays steps: 0 (all of them) for a log (a pipe, --json),
  // else just before the newest step of a long history, with its first step's loss (the summary
  // line's "loss a -> b") from GetJobSteps.
  absl::StatusOr<int64_t> ReplayAfter(CoordinatorStub& stub, const std::string& job_id) {
    if (inv_.json || !(inv_.quiet || output_.tty)) return 0;
    ASSIGN_OR_RETURN(Job job, stub.GetJob(job_id));
    const int64_t newest = job.latest().step();
    if (newest <= kReplayedSteps) return 0;
    GetJobStepsRequest first;  // the first step a run of this job trained
    first.set_job_id(job_id);
    first.set_until_step(job.resumed_from_step() + 1);
    first.set_max_steps(1);
    ASSIGN_OR_RETURN(GetJobStepsResponse steps, stub.GetJobSteps(first));
    if (steps.steps_size() > 0) first_loss_ = steps.steps(0).loss();
    return newest - 1;
  }

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
    // --quiet and --every choose the lines in both modes.
    if (inv_.quiet && !u.has_state_change()) return;
    if (u.has_step() && u.step().step() % inv_.every != 0 &&
        u.step().step() != job_.spec().steps()) {
      return;
    }
    if (inv_.json) {
      output_.out << WatchJsonLine(u) << "\n";
      output_.out.flush();
      return;
    }
    if (u.has_state_change()) {
      // The summary line says the final state; printing it here too would double it.
      if (!IsFinalState(u.state_change().state())) {
        PrintLine(StateChangeLine(job_.id(), u.state_change()));
      }
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
    } else if (job_.state() == QUEUED && job_.queue_position() > 0) {
      // A queued job's new place ("job-000011 QUEUED: position 2 in the queue").
      Job place = job_;
      place.clear_reason();
      PrintLine(absl::StrCat(job_.id(), " ", StateText(QUEUED, JobReason(place))));
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

// Reads were unbounded: `dtrain submit /dev/zero` held 1.7 GB after 4 s. A spec is JSON of
// at most the coordinator's --max_spec_bytes (1 MiB by default); this leaves room for a raised
// limit and stops reading a stream that never ends.
constexpr int64_t kMaxSpecFileBytes = int64_t{16} << 20;

// Appends up to `limit` + 1 bytes of `in` to `text` (one more than allowed says "too large").
void ReadAtMost(std::istream& in, int64_t limit, std::string* text) {
  char buffer[64 << 10];
  while (in && static_cast<int64_t>(text->size()) <= limit) {
    const int64_t want =
        std::min<int64_t>(sizeof(buffer), limit + 1 - static_cast<int64_t>(text->size()));
    in.read(buffer, want);
    text->append(buffer, static_cast<size_t>(in.gcount()));
  }
}

// The text of a spec file (`-`: standard input); nullopt after printing why it cannot be used:
// missing or unreadable, a directory, larger than kMaxSpecFileBytes, or empty.
std::optional<std::string> ReadSpecFile(const std::string& path, Output& output) {
  std::string text;
  const std::string name = path == "-" ? "standard input" : path;
  if (path == "-") {
    if (output.in != nullptr) ReadAtMost(*output.in, kMaxSpecFileBytes, &text);
  } else {
    struct stat info;
    if (stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      output.err << "dtrain: " << path << " is a directory, not a job spec file\n";
      return std::nullopt;
    }
    std::ifstream file(path, std::ios::binary);
    if (file) ReadAtMost(file, kMaxSpecFileBytes, &text);
    if (!file.is_open() || file.bad()) {
      output.err << "dtrain: cannot read " << path << ": " << std::strerror(errno) << "\n";
      return std::nullopt;
    }
  }
  if (static_cast<int64_t>(text.size()) > kMaxSpecFileBytes) {
    output.err << "dtrain: " << name << " is larger than " << (kMaxSpecFileBytes >> 20)
               << " MiB: not a job spec (a JSON object; the coordinator accepts at most its "
                  "--max_spec_bytes, 1 MiB by default)\n";
    return std::nullopt;
  }
  if (absl::StripAsciiWhitespace(text).empty()) {
    output.err << "dtrain: " << name
               << ": file is empty (a job spec is a JSON object; see deploy/examples/)\n";
    return std::nullopt;
  }
  return text;
}

// Submits `request`; prints the new job (and the coordinator's warnings on stderr), then
// follows it with --watch. `what` names the input in a rejection ("job.json").
int SubmitAndMaybeWatch(const SubmitJobRequest& request, const std::string& what,
                        const std::string& note, const Invocation& inv, CoordinatorStub& stub,
                        Output& output) {
  absl::StatusOr<SubmitJobResponse> response = stub.SubmitJob(request);
  if (!response.ok()) {
    if (response.status().code() == absl::StatusCode::kInvalidArgument) {
      output.err << "dtrain: the coordinator rejected " << what << ":\n";
      absl::string_view message = response.status().message();
      absl::ConsumePrefix(&message, "SubmitJob: ");
      for (const std::string& problem : SplitProblems(std::string(message))) {
        output.err << "  " << problem << "\n";
      }
      return kExitUsage;
    }
    return Fail(response.status(), inv, output);
  }
  const Job& job = response->job();
  for (const std::string& warning : response->warnings()) {
    output.err << "warning: " << warning << "\n";
  }
  if (inv.json) {
    output.out << ToJsonLine(job) << "\n";
  } else {
    output.out << "submitted " << job.id()
               << (job.spec().name().empty() ? "" : absl::StrCat(" (", job.spec().name(), ")"))
               << note << ": " << ProgressLine(job, std::nullopt).substr(job.id().size() + 1)
               << "\n";
  }
  output.out.flush();
  if (!inv.watch) return kExitOk;
  return Watcher(inv, output).Run(stub, job.id());
}

int Submit(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  const std::string& path = inv.args[0];
  const std::optional<std::string> contents = ReadSpecFile(path, output);
  if (!contents.has_value()) return kExitUsage;
  SubmitJobRequest request;
  request.set_spec_json(*contents);
  request.set_allow_waiting(inv.allow_waiting);
  return SubmitAndMaybeWatch(request, path == "-" ? "the spec on standard input" : path, "", inv,
                             stub, output);
}

// `resubmit`: the job's spec (as the coordinator validated it) submitted again; --resume
// continues from the job's last sealed step, --steps trains to another step.
int Resubmit(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  absl::StatusOr<Job> job = stub.GetJob(*id);
  if (!job.ok()) return Fail(WithNewestJobHint(stub, job.status()), inv, output);
  SubmitJobRequest request;
  request.set_allow_waiting(inv.allow_waiting);
  JobSpec& spec = *request.mutable_spec();
  spec = job->spec();
  if (inv.steps > 0) spec.set_steps(inv.steps);
  if (inv.resume) spec.set_resume_from(*id);
  std::string note = absl::StrCat(", a copy of ", *id);
  if (inv.resume) absl::StrAppend(&note, " resuming from its last sealed step");
  if (inv.steps > 0) absl::StrAppend(&note, " with steps ", inv.steps);
  return SubmitAndMaybeWatch(request, absl::StrCat("the spec of ", *id), note, inv, stub, output);
}

// `data prepare`: a text file tokenized into an llm.c token file.
int DataPrepare(const Invocation& inv, Output& output) {
  if (inv.args[0] != "prepare") {
    output.err << "dtrain: use `dtrain data prepare IN.txt OUT.bin [--tokenizer=gpt2|byte]`\n";
    return kExitUsage;
  }
  absl::StatusOr<PreparedTokens> prepared =
      PrepareTokenFile(inv.args[1], inv.args[2], inv.tokenizer, inv.tokenizer_dir,
                       [&output](const std::string& line) {
                         output.err << "data prepare: " << line << "\n";
                         output.err.flush();
                       });
  if (!prepared.ok()) {
    output.err << "dtrain: data prepare: " << prepared.status().message() << "\n";
    return prepared.status().code() == absl::StatusCode::kInternal ? kExitOtherError : kExitUsage;
  }
  output.out << "wrote " << inv.args[2] << ": " << prepared->tokens << " tokens from "
             << prepared->bytes << " bytes (" << inv.tokenizer << ", vocab_size "
             << prepared->vocab_size << ")\n";
  return kExitOk;
}

// `export-metrics JOB`: the steps a job's watch replays, as CSV or TensorBoard events; of a job
// that has not ended, those up to its latest step when asked.
int ExportMetrics(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  absl::StatusOr<Job> job = stub.GetJob(*id);
  if (!job.ok()) return Fail(job.status(), inv, output);
  const bool ended = IsFinalState(job->state());
  const int64_t latest = job->latest().step();
  std::vector<StepMetrics> steps;
  if (ended || latest > 0) {
    bool done = false;  // a job that goes on: every step up to `latest` was replayed
    absl::Status watched = stub.WatchJob(*id, 0,
                                         {.on_update =
                                              [&](const JobUpdate& u) {
                                                if (!u.has_step()) return;
                                                steps.push_back(u.step());
                                                if (!ended && u.step().step() >= latest)
                                                  done = true;
                                              },
                                          .keep_watching = [&] { return !done; }});
    if (!watched.ok() && !(done && absl::IsCancelled(watched))) return Fail(watched, inv, output);
  }
  absl::StatusOr<std::string> text = MetricsExport(steps, inv.format);
  if (!text.ok()) return Fail(text.status(), inv, output);
  if (inv.output == "-") {
    output.out << *text;
    return kExitOk;
  }
  if (absl::Status s = WriteFileAtomically(inv.output, *text); !s.ok()) {
    return Fail(s, inv, output);
  }
  output.out << "wrote " << inv.output << ": " << steps.size() << " steps of " << *id << " ("
             << inv.format
             << (ended ? ")\n"
                       : absl::StrCat("; ", JobStateName(job->state()), ": its steps so far)\n"));
  return kExitOk;
}

// `sample JOB`: dtrain-sample on the job's checkpoint directory (its newest sealed step), or,
// without one, on its final weights (`output`, with the spec's head count).
int SampleJob(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  absl::StatusOr<Job> job = stub.GetJob(*id);
  if (!job.ok()) return Fail(job.status(), inv, output);
  if (job->checkpoint().last_sealed_step() > 0 && !job->checkpoint().dir().empty()) {
    return RunSampler(job->checkpoint().dir(), inv, output.err);
  }
  if (!job->output().empty()) {
    Invocation with_heads = inv;
    if (with_heads.n_head == 0) with_heads.n_head = job->spec().model().n_head();
    return RunSampler(job->output(), with_heads, output.err);
  }
  output.err << "dtrain: " << *id << " has no sealed checkpoint and no final weights yet to "
             << "sample from\n";
  return kExitUsage;
}

// `export`: the shards of a complete checkpoint step (its manifest) into one safetensors file.
int Export(const Invocation& inv, Output& output) {
  // Exit codes (client/README.md): 4 no such checkpoint, 2 not a complete or intact one (or
  // not a checkpoint), 6 the checkpoint is fine but OUT cannot be written.
  const absl::Status readable = parallel::ReadManifest(inv.args[0]).status();
  absl::StatusOr<model::CheckpointStep> exported =
      readable.ok() ? parallel::ExportSafetensors(inv.args[0], inv.args[1]) : readable;
  if (!exported.ok()) {
    const absl::Status& s = exported.status();
    output.err << "dtrain: export failed: " << s.message() << "\n";
    if (!readable.ok()) {
      return s.code() == absl::StatusCode::kNotFound ? kExitNotFound : kExitUsage;
    }
    switch (s.code()) {
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kDataLoss:
        return kExitUsage;  // a shard missing or damaged
      default:
        return kExitOtherError;  // writing OUT
    }
  }
  output.out << parallel::ExportSummary(*exported, inv.args[1]) << "\n";
  return kExitOk;
}

// `certs init DIR` / `certs issue DIR NAME --role=ROLE`: what was written and the next step.
int Certs(const Invocation& inv, Output& output) {
  const std::string& action = inv.args[0];
  const std::string& dir = inv.args[1];
  CertOptions options;
  options.hosts = absl::StrSplit(inv.cert_hosts, ',', absl::SkipWhitespace());
  options.days = inv.days;
  if (!inv.not_after.empty()) {
    absl::StatusOr<absl::Time> end = ParseCertDate(inv.not_after);
    if (!end.ok()) {
      output.err << "dtrain: --not_after: " << end.status().message() << "\n";
      return kExitUsage;
    }
    options.not_after = *end;
  }
  absl::StatusOr<std::vector<std::string>> written;
  if (action == "init" && inv.args.size() == 2) {
    written = InitCertificates(dir, options);
  } else if (action == "issue" && inv.args.size() == 3 && !inv.role.empty()) {
    written = IssueCertificate(dir, inv.args[2], inv.role, options);
  } else {
    output.err << "dtrain: use `dtrain certs init DIR` or `dtrain certs issue DIR NAME "
                  "--role=ROLE`\n";
    return kExitUsage;
  }
  if (!written.ok()) {
    output.err << "dtrain: certs " << action << ": " << written.status().message() << "\n";
    return written.status().code() == absl::StatusCode::kInternal ? kExitOtherError : kExitUsage;
  }
  for (const std::string& path : *written) output.out << "wrote " << path << "\n";
  if (action == "init") {
    output.out << "next: start the coordinator with --tls_ca=" << dir
               << "/ca.pem --tls_cert=" << dir << "/coordinator.pem --tls_key=" << dir
               << "/coordinator.key, the workers "
               << "with worker.pem and worker.key, and the CLI with admin.pem and admin.key "
               << "(or DTRAIN_TLS_CA, DTRAIN_TLS_CERT, DTRAIN_TLS_KEY); keep ca.key offline\n";
  } else {
    output.out << "next: give " << inv.args[2] << ".pem, " << inv.args[2] << ".key and ca.pem "
               << "to its holder (--tls_ca, --tls_cert, --tls_key)\n";
  }
  return kExitOk;
}

// `plan`: the job's plan (the coordinator's SubmitJob makes the same, so `submit` rejects what
// this rejects, in the same words) placed on hypothetical workers; no call.
int PlanJob(const Invocation& inv, Output& output) {
  const std::string& path = inv.args[0];
  const std::optional<std::string> contents = ReadSpecFile(path, output);
  if (!contents.has_value()) return kExitUsage;
  absl::StatusOr<JobPlan> job = plan::ParseJobPlanJson(*contents);
  if (!job.ok()) {
    output.err << "dtrain: " << path << " is not a valid job spec:\n";
    absl::string_view message = job.status().message();
    absl::ConsumePrefix(&message, "invalid job spec: ");
    for (const std::string& problem : SplitProblems(std::string(message))) {
      output.err << "  " << problem << "\n";
    }
    return kExitUsage;
  }
  PlanOptions options;
  options.workers = inv.workers;
  options.hosts = inv.hosts;
  absl::StatusOr<Plan> plan = MakePlan(*job, options);
  if (!plan.ok()) {
    // Whatever the code (too few --workers or --hosts for the layout), the input is what must
    // change.
    output.err << "dtrain: " << path << " cannot run: " << plan.status().message() << "\n";
    return kExitUsage;
  }
  output.out << (inv.json ? PlanJson(*plan, path) + "\n" : PlanText(*plan, path));
  return kExitOk;
}

// Runs `each` for every job id argument, resolved; returns the first failure's exit code (every
// argument is still tried).
int ForEachJob(const Invocation& inv, CoordinatorStub& stub, Output& output,
               const std::function<int(const std::string& job_id)>& each) {
  int exit_code = kExitOk;
  for (const std::string& arg : inv.args) {
    absl::StatusOr<std::string> id = ResolveJobId(stub, arg);
    const int code = id.ok() ? each(*id) : Fail(id.status(), inv, output);
    if (exit_code == kExitOk) exit_code = code;
  }
  return exit_code;
}

int ShowStatus(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  bool first = true;
  return ForEachJob(inv, stub, output, [&](const std::string& id) {
    absl::StatusOr<Job> job = stub.GetJob(id);
    if (!job.ok()) return Fail(WithNewestJobHint(stub, job.status()), inv, output);
    if (!first && !inv.json) output.out << "\n";
    first = false;
    output.out << (inv.json ? ToJsonLine(*job) + "\n" : JobDetail(*job, absl::Now()));
    return static_cast<int>(kExitOk);
  });
}

// One page of job summaries; when older jobs match too, the table ends with the command that
// lists them (--json: next_page_token).
int List(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  ListJobsRequest request;
  request.set_limit(inv.limit);
  for (JobState state : inv.states) request.add_states(state);
  request.set_page_token(inv.page);
  request.set_owner(inv.owner);
  request.set_mine(inv.mine);
  absl::StatusOr<ListJobsResponse> jobs = stub.ListJobs(request);
  if (!jobs.ok()) return Fail(jobs.status(), inv, output);
  if (inv.json) {
    output.out << ToJsonLine(*jobs) << "\n";
  } else if (jobs->jobs_size() == 0) {
    const bool by_owner = !inv.owner.empty() || inv.mine;
    output.out << (by_owner             ? "no jobs of that owner match\n"
                   : inv.states.empty() ? "no jobs\n"
                                        : "no jobs in those states\n");
  } else {
    output.out << JobsTable(*jobs, absl::Now());
    if (!jobs->next_page_token().empty()) {
      std::vector<std::string> states;
      for (JobState state : inv.states) states.push_back(JobState_Name(state));
      output.out << "older jobs: dtrain list --page=" << jobs->next_page_token()
                 << (states.empty() ? "" : absl::StrCat(" --state=", absl::StrJoin(states, ",")))
                 << (inv.owner.empty() ? "" : absl::StrCat(" --owner=", inv.owner))
                 << (inv.mine ? " --mine" : "")
                 << (inv.limit > 0 ? absl::StrCat(" --limit=", inv.limit) : "") << "\n";
    }
  }
  return kExitOk;
}

int Watch(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  return Watcher(inv, output).Run(stub, *id);
}

// Cancelling a job that already ended is not an error: there is nothing left to stop.
int Cancel(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  return ForEachJob(inv, stub, output, [&](const std::string& id) {
    absl::StatusOr<Job> job = stub.CancelJob(id, inv.reason);
    if (job.status().code() == absl::StatusCode::kFailedPrecondition &&
        absl::StrContains(job.status().message(), "already ended")) {
      absl::string_view message = job.status().message();
      absl::ConsumePrefix(&message, "CancelJob: ");
      output.err << "dtrain: note: " << message << "; nothing to cancel\n";
      job = stub.GetJob(id);
    }
    if (!job.ok()) return Fail(WithNewestJobHint(stub, job.status()), inv, output);
    output.out << (inv.json ? ToJsonLine(*job) : ProgressLine(*job, std::nullopt)) << "\n";
    return static_cast<int>(kExitOk);
  });
}

// "deleted job-000005 (SUCCEEDED, "tiny"): " and what became of its directory. A directory
// left in place is an error (exit 6): the records are gone, the files are not.
int PrintDeleted(const Invocation& inv, const std::string& id,
                 const absl::StatusOr<DeleteJobResponse>& deleted, CoordinatorStub& stub,
                 Output& output) {
  if (!deleted.ok()) return Fail(WithNewestJobHint(stub, deleted.status()), inv, output);
  if (inv.json) {
    output.out << ToJsonLine(*deleted) << "\n";
  } else {
    const Job& job = deleted->job();
    output.out << "deleted " << job.id() << " (" << JobState_Name(job.state()) << ", \""
               << job.spec().name() << "\"): ";
    if (deleted->has_files()) {
      output.out << plan::DescribeDirRemoval(deleted->files()) << "\n";
    } else if (!job.checkpoint().dir().empty()) {
      output.out << "its directory " << job.checkpoint().dir() << " on " << job.checkpoint().host()
                 << " stays (`--files` removes it)\n";
    } else {
      output.out << "it wrote no files\n";
    }
  }
  if (deleted->files().state() != DIR_REMOVAL_FAILED) return kExitOk;
  output.err << "dtrain: " << id
             << "'s records were deleted, its directory was not: " << deleted->files().error()
             << "\n";
  return kExitOtherError;
}

// Several jobs are deleted kDeletesAtOnce at a time: each call may wait for a worker's
// heartbeat (a second or two), so one after the other 1,000 jobs would take half an hour.
constexpr size_t kDeletesAtOnce = 8;

int Delete(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  std::vector<absl::StatusOr<std::string>> ids;
  for (const std::string& arg : inv.args) ids.push_back(ResolveJobId(stub, arg));
  std::vector<absl::StatusOr<DeleteJobResponse>> results(ids.size(),
                                                         absl::UnknownError("not called"));
  for (size_t first = 0; first < ids.size(); first += kDeletesAtOnce) {
    std::vector<std::thread> calls;
    for (size_t i = first; i < std::min(ids.size(), first + kDeletesAtOnce); ++i) {
      if (!ids[i].ok()) continue;
      calls.emplace_back([&, i] { results[i] = stub.DeleteJob(*ids[i], inv.files); });
    }
    for (std::thread& t : calls) t.join();
  }
  int exit_code = kExitOk;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int code = ids[i].ok() ? PrintDeleted(inv, *ids[i], results[i], stub, output)
                                 : Fail(ids[i].status(), inv, output);
    if (exit_code == kExitOk) exit_code = code;
  }
  return exit_code;
}

// The job's state changes (its history) as the coordinator's lines, for `logs`.
std::vector<LogEntry> StateLines(CoordinatorStub& stub, const std::string& job_id) {
  std::vector<LogEntry> lines;
  absl::StatusOr<Job> job = stub.GetJob(job_id);
  if (!job.ok()) return lines;  // the log itself says what is wrong
  for (const StateChange& change : job->history()) {
    LogEntry& line = lines.emplace_back();
    line.set_rank(-1);
    line.set_time_unix_ms(change.time_unix_ms());
    line.set_text(absl::StrCat("state ", JobState_Name(change.state()), ": ", change.reason()));
  }
  return lines;
}

int Logs(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  // Text, every rank: the state changes between the recorded lines, in time order.
  const bool states = !inv.json && !inv.rank.has_value();
  std::vector<LogEntry> changes = states ? StateLines(stub, *id) : std::vector<LogEntry>();
  size_t shown = 0;
  auto print = [&](const LogEntry& e) {
    output.out << (inv.json ? ToJsonLine(e) : LogEntryLine(e)) << "\n";
  };
  auto states_until = [&](int64_t time_unix_ms) {
    for (; shown < changes.size() && changes[shown].time_unix_ms() <= time_unix_ms; ++shown) {
      print(changes[shown]);
    }
  };
  const absl::Status status = stub.JobLogs(*id, inv.rank, inv.follow, [&](const LogEntry& e) {
    states_until(e.time_unix_ms());
    print(e);
    output.out.flush();
  });
  if (!status.ok()) return Fail(WithNewestJobHint(stub, status), inv, output);
  if (states) {
    if (inv.follow) {  // the changes while it was followed, the end among them
      std::vector<LogEntry> now = StateLines(stub, *id);
      for (size_t i = changes.size(); i < now.size(); ++i) changes.push_back(now[i]);
    }
    states_until(std::numeric_limits<int64_t>::max());
  }
  return kExitOk;
}

int Checkpoints(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  absl::StatusOr<ListCheckpointsResponse> response = stub.ListCheckpoints(*id);
  if (!response.ok()) return Fail(WithNewestJobHint(stub, response.status()), inv, output);
  output.out << (inv.json ? ToJsonLine(*response) + "\n"
                          : CheckpointsText(*id, *response, absl::Now()));
  return kExitOk;
}

int Diagnose(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  absl::StatusOr<JobDiagnosis> diagnosis = stub.Diagnose(*id);
  if (!diagnosis.ok()) return Fail(WithNewestJobHint(stub, diagnosis.status()), inv, output);
  output.out << (inv.json ? ToJsonLine(*diagnosis) + "\n" : DiagnosisText(*diagnosis));
  return kExitOk;
}

// `dtrain rebalance JOB`: the decision in words ("stage 1 (w2) measured 2.0x slower per layer:
// cut 3,3,3 -> 4,1,4 (...)"), and when the job moves, when.
int Rebalance(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  absl::StatusOr<RebalanceJobResponse> r = stub.RebalanceJob(*id);
  if (!r.ok()) return Fail(WithNewestJobHint(stub, r.status()), inv, output);
  if (inv.json) {
    output.out << ToJsonLine(*r) << "\n";
  } else {
    output.out << *id << ": " << r->summary()
               << (r->moved() ? "; the job restarts on the new cut (dtrain logs says when)"
                              : "; the cut stays")
               << "\n";
  }
  return kExitOk;
}

// `dtrain checkpoint JOB`: asks, then follows the job until a step after its last sealed one is
// sealed (checked twice a second, at most kCheckpointWait):
//   job-000007: checkpoint asked for (last sealed: step 20); waiting for its seal
//   job-000007: step 23 sealed in 1.6s (/ck/job-000007; dtrain checkpoints lists it)
constexpr absl::Duration kCheckpointWait = absl::Minutes(10);

// The coordinator went away while `dtrain checkpoint` waited (a restart, which does not keep
// the ask): polls every second for up to --reconnect_for. What the poll returns then, or the
// last failure; the caller asks again once the job runs (`*ask_again`).
absl::StatusOr<Job> Reconnect(const Invocation& inv, CoordinatorStub& stub, const std::string& id,
                              const absl::Status& why, bool* ask_again, Output& output) {
  output.err << "dtrain: lost " << inv.coordinator << " (" << why.message()
             << "); reconnecting for up to " << absl::FormatDuration(inv.reconnect_for)
             << std::endl;
  const absl::Time give_up = absl::Now() + inv.reconnect_for;
  absl::StatusOr<Job> job = why;
  while (absl::Now() < give_up) {
    absl::SleepFor(absl::Seconds(1));
    job = stub.GetJob(id);
    if (job.ok() || ExitCodeFor(job.status()) != kExitUnreachable) break;
  }
  *ask_again = job.ok();
  return job;
}

int CheckpointNow(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  const absl::Time start = absl::Now();
  absl::StatusOr<Job> job = stub.CheckpointJob(*id);
  if (!job.ok()) return Fail(WithNewestJobHint(stub, job.status()), inv, output);
  const int64_t before = job->checkpoint().last_sealed_step();
  if (!inv.json) {
    output.out << *id << ": checkpoint asked for (last sealed: "
               << (before == 0 ? std::string("none") : absl::StrCat("step ", before))
               << "); waiting for its seal" << std::endl;
  }
  absl::Time last_said = start;
  bool ask_again = false;  // the coordinator restarted: ask again once the job runs
  const int64_t skipped_before = job->checkpoint().last_skipped_step();
  while (job->checkpoint().last_sealed_step() <= before) {
    if (job->checkpoint().last_skipped_step() > std::max(before, skipped_before)) {
      return Fail(absl::ResourceExhaustedError(absl::StrCat(
                      *id, ": the checkpoint of step ", job->checkpoint().last_skipped_step(),
                      " was skipped, training went on: ", job->checkpoint().last_skip_reason())),
                  inv, output);
    }
    if (IsFinalState(job->state())) {
      return Fail(
          absl::FailedPreconditionError(absl::StrCat(*id, " ended ", JobState_Name(job->state()),
                                                     " before its checkpoint: ", job->reason())),
          inv, output);
    }
    if (absl::Now() - start > kCheckpointWait) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
                      "no step of ", *id, " sealed in ", absl::FormatDuration(kCheckpointWait),
                      " (it is ", JobState_Name(job->state()), ": ", job->reason(),
                      "); `dtrain checkpoints ", *id, "` shows when one is")),
                  inv, output);
    }
    absl::SleepFor(absl::Milliseconds(500));
    job = stub.GetJob(*id);
    if (!job.ok() && ExitCodeFor(job.status()) == kExitUnreachable) {
      job = Reconnect(inv, stub, *id, job.status(), &ask_again, output);
    }
    if (job.ok() && ask_again && job->state() == RUNNING &&
        job->checkpoint().last_sealed_step() <= before) {  // back, and running: ask again
      output.err << "dtrain: reconnected to " << inv.coordinator << "; asking " << *id
                 << " for its checkpoint again" << std::endl;
      ask_again = false;
      job = stub.CheckpointJob(*id);
    }
    if (!job.ok()) return Fail(job.status(), inv, output);
    // Long steps or a slow disk: say where it is every 10 s (a skipped checkpoint, a full disk,
    // is in its log).
    if (!inv.json && absl::Now() - last_said >= absl::Seconds(10)) {
      last_said = absl::Now();
      output.out << *id << ": still waiting after "
                 << absl::StrFormat("%.0fs", absl::ToDoubleSeconds(last_said - start)) << ": "
                 << JobState_Name(job->state()) << " at step " << job->latest().step()
                 << ", no step after " << before << " sealed yet (`dtrain logs " << *id
                 << "` says if one was skipped)" << std::endl;
    }
  }
  if (inv.json) {
    output.out << ToJsonLine(*job) << "\n";
  } else {
    output.out << *id << ": step " << job->checkpoint().last_sealed_step() << " sealed in "
               << absl::StrFormat("%.1fs", absl::ToDoubleSeconds(absl::Now() - start)) << " ("
               << job->checkpoint().dir() << "; dtrain checkpoints lists it)\n";
  }
  return kExitOk;
}

// `dtrain priority JOB N`: "job-000007: priority 5; QUEUED: next in the queue".
int Priority(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  absl::StatusOr<int32_t> priority = ParsePriority(inv.args[1]);
  if (!priority.ok()) return Fail(priority.status(), inv, output);
  absl::StatusOr<Job> job = stub.SetJobPriority(*id, *priority);
  if (!job.ok()) return Fail(WithNewestJobHint(stub, job.status()), inv, output);
  if (inv.json) {
    output.out << ToJsonLine(*job) << "\n";
  } else {
    // A queued job's place is now's, its reason the scheduler's last pass's (which may speak of
    // the old priority): the place alone.
    Job now = *job;
    if (now.state() == QUEUED) now.clear_reason();
    output.out << *id << ": priority " << now.spec().priority() << "; "
               << StateText(now.state(), JobReason(now)) << "\n";
  }
  return kExitOk;
}

// `dtrain trace JOB [--step N] [-o FILE]`: the trace file (client/trace.h), and a line saying
// what it holds when it went to a file.
int Trace(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  std::optional<int64_t> step;
  if (inv.step.has_value()) step = *inv.step;
  absl::StatusOr<JobTrace> trace = stub.TraceJob(*id, step);
  if (!trace.ok()) return Fail(WithNewestJobHint(stub, trace.status()), inv, output);
  const std::string json = ChromeTraceJson(*trace);
  if (inv.output == "-") {
    output.out << json;
    return kExitOk;
  }
  if (absl::Status s = WriteFileAtomically(inv.output, json); !s.ok()) {
    return Fail(s, inv, output);
  }
  output.out << TraceSummary(*trace, inv.output);
  return kExitOk;
}

// `workers drain ID [--now]`, `workers undrain ID`.
int DrainWorker(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  const bool drain = inv.args[0] == "drain";
  if ((!drain && inv.args[0] != "undrain") || inv.args.size() != 2) {
    output.err << "dtrain: workers takes `drain WORKER_ID [--now]` or `undrain WORKER_ID`\n";
    return kExitUsage;
  }
  DrainWorkerRequest request;
  request.set_worker_id(inv.args[1]);
  request.set_drain(drain);
  request.set_now(inv.drain_now);
  absl::StatusOr<DrainWorkerResponse> r = stub.DrainWorker(request);
  if (!r.ok()) return Fail(r.status(), inv, output);
  if (inv.json) {
    output.out << ToJsonLine(*r) << "\n";
    return kExitOk;
  }
  const std::string& id = inv.args[1];
  if (!drain) {
    output.out << "worker " << id << " undrained: it takes jobs again\n";
  } else if (r->job_id().empty()) {
    output.out << "worker " << id << " drained: it takes no new job"
               << (r->worker().state() == DRAINED ? "; it is idle and can be stopped" : "") << "\n";
  } else {
    output.out << "worker " << id << " drained: " << r->job_id() << " moves off it "
               << (r->moved_now() ? "now" : "at its next sealed checkpoint")
               << " (a maintenance restart, not counted against max_restarts); `dtrain workers` "
                  "shows it DRAINED once the job left, then it can be stopped\n";
  }
  return kExitOk;
}

int Workers(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  if (!inv.args.empty()) return DrainWorker(inv, stub, output);
  if (!inv.forget.empty()) {
    absl::StatusOr<ForgetWorkerResponse> forgot = stub.ForgetWorker(inv.forget);
    if (!forgot.ok()) return Fail(forgot.status(), inv, output);
    if (inv.json) {
      output.out << ToJsonLine(*forgot) << "\n";
      return kExitOk;
    }
    output.out << "forgot worker " << inv.forget << "\n";
    // Deleted jobs' directories on its host, which no worker is left to remove.
    for (const JobDirRemoved& left : forgot->abandoned()) {
      output.out << left.job_id() << " (deleted): " << plan::DescribeDirRemoval(left) << "\n";
    }
    return kExitOk;
  }
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
  if (inv.command == "plan") return PlanJob(inv, output);
  if (inv.command == "export") return Export(inv, output);
  if (inv.command == "certs") return Certs(inv, output);
  if (inv.command == "data") return DataPrepare(inv, output);
  if (inv.command == "sample") return RunSampler(inv.args[0], inv, output.err);
  output.err << "dtrain: '" << inv.command << "' needs the coordinator\n";
  return kExitUsage;
}

int RunInvocation(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  if (!NeedsCoordinator(inv)) return RunWithoutCoordinator(inv, output);
  if (inv.command == "submit") return Submit(inv, stub, output);
  if (inv.command == "resubmit") return Resubmit(inv, stub, output);
  if (inv.command == "status") return ShowStatus(inv, stub, output);
  if (inv.command == "list") return List(inv, stub, output);
  if (inv.command == "watch") return Watch(inv, stub, output);
  if (inv.command == "cancel") return Cancel(inv, stub, output);
  if (inv.command == "delete") return Delete(inv, stub, output);
  if (inv.command == "logs") return Logs(inv, stub, output);
  if (inv.command == "checkpoints") return Checkpoints(inv, stub, output);
  if (inv.command == "diagnose") return Diagnose(inv, stub, output);
  if (inv.command == "trace") return Trace(inv, stub, output);
  if (inv.command == "rebalance") return Rebalance(inv, stub, output);
  if (inv.command == "checkpoint") return CheckpointNow(inv, stub, output);
  if (inv.command == "priority") return Priority(inv, stub, output);
  if (inv.command == "workers") return Workers(inv, stub, output);
  if (inv.command == "sample") return SampleJob(inv, stub, output);
  if (inv.command == "export-metrics") return ExportMetrics(inv, stub, output);
  output.err << "dtrain: unknown command '" << inv.command << "'\n";
  return kExitUsage;
}

}  // namespace client
}  // namespace dtrain
