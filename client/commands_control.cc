// The commands that act on a running job or the cluster: diagnose, rebalance, checkpoint,
// priority, trace and workers.
#include "client/command_set.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/format.h"
#include "client/trace.h"
#include "common/files.h"
#include "plan/dir_removal_text.h"

namespace dtrain::client::command {

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace dtrain::client::command
