// `dtrain watch` and `submit --watch`: a job followed to its end, its steps, events and state
// changes printed as they come (a progress line on a terminal), through coordinator restarts.
#include "client/command_set.h"

#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/format.h"
#include "common/status_macros.h"

namespace dtrain::client::command {

namespace {

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

}  // namespace

int WatchToEnd(const Invocation& inv, Output& output, CoordinatorStub& stub,
               const std::string& job_id) {
  return Watcher(inv, output).Run(stub, job_id);
}

}  // namespace dtrain::client::command
