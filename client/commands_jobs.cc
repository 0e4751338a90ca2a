// The commands about jobs: submit, resubmit, status, list, watch, cancel, delete, logs,
// checkpoints, export-metrics and sample.
#include "client/command_set.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/export_metrics.h"
#include "client/format.h"
#include "client/sample.h"
#include "common/files.h"
#include "plan/dir_removal_text.h"

namespace dtrain::client::command {

namespace {

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
  return WatchToEnd(inv, output, stub, job.id());
}

}  // namespace

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

// `sample JOB`: the coordinator's SampleJob, drawn by a worker that can read the job's files.
// The text on stdout as dtrain-sample prints it (--json: SampleJobResponse's fields), what it
// was drawn from and by whom on stderr.
int SampleJob(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<SampleParameters> parameters = SampleParametersOf(inv);
  if (!parameters.ok()) {
    output.err << "dtrain: " << parameters.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> id = ResolveJobId(stub, inv.args[0]);
  if (!id.ok()) return Fail(id.status(), inv, output);
  absl::StatusOr<SampleJobResponse> sample = stub.SampleJob(*id, *parameters, kSampleWait);
  if (absl::IsDeadlineExceeded(sample.status())) {
    // The coordinator's own answer (the worker was too slow) as much as a silent coordinator.
    output.err << "dtrain: DEADLINE_EXCEEDED: " << sample.status().message() << "\n";
    return kExitOtherError;
  }
  if (!sample.ok()) return Fail(sample.status(), inv, output);
  output.out << (inv.json ? ToJsonLine(*sample) : sample->text()) << "\n";
  output.err << "(" << *id << ": " << sample->source() << ", drawn by worker "
             << sample->worker_id() << ")\n";
  return kExitOk;
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
  return WatchToEnd(inv, output, stub, *id);
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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace dtrain::client::command
