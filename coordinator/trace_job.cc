#include "coordinator/trace_job.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "plan/job_plan.h"

namespace dtrain::coordinator {
namespace {

bool Ended(const FlightEntry& e) {
  return e.state() == FlightEntry::DONE || e.state() == FlightEntry::FAILED;
}

// Indices [first, end) of the records between the rank's first record of `step` and its first
// record of a later step; end = -1 when no later step has begun.
struct Window {
  int first = -1;
  int end = -1;
};

Window WindowOf(const RankDiagnosis& r, int64_t step) {
  Window w;
  for (int i = 0; i < r.entries_size(); ++i) {
    const int64_t s = r.entries(i).step();
    if (w.first < 0 && s == step) w.first = i;
    if (w.first >= 0 && s > step) {
      w.end = i;
      break;
    }
  }
  return w;
}

// Whether record `i` is one of `step`'s (see the top of the header).
bool InStep(const RankDiagnosis& r, int i, int64_t step, const Window& w) {
  const int64_t s = r.entries(i).step();
  return s == step || (s < 0 && i >= w.first && i < w.end);
}

// "40-52", "7, 9-11": steps as ranges.
std::string StepRanges(const std::vector<int64_t>& steps) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(steps[i]) : absl::StrCat(steps[i], "-", steps[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

absl::StatusOr<JobTrace> FitsOneMessage(JobTrace trace, size_t limit) {
  const size_t bytes = trace.ByteSizeLong();
  if (bytes <= limit) return trace;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "job %s: step %d on %d ranks is %.1f MiB of records, over the %.1f MiB one answer may "
      "carry (common/grpc_limits.h): too many operations in one step to trace at once",
      trace.job_id(), trace.step(), trace.ranks_size(), bytes / 1048576.0, limit / 1048576.0));
}

std::vector<int64_t> CompleteSteps(const RankDiagnosis& r) {
  std::set<int64_t> seen;
  for (const FlightEntry& e : r.entries()) {
    if (e.step() >= 0) seen.insert(e.step());
  }
  const bool wrapped = r.recorded() > static_cast<uint64_t>(r.entries_size());
  std::vector<int64_t> complete;
  for (int64_t step : seen) {
    const Window w = WindowOf(r, step);
    if (w.end < 0) continue;  // no later step yet: its tail may still run
    // From its start: nothing of it can have been overwritten before a record of an earlier step.
    if (wrapped && *seen.begin() >= step) continue;
    bool ended = true;
    for (int i = 0; i < r.entries_size() && ended; ++i) {
      if (InStep(r, i, step, w)) ended = Ended(r.entries(i));
    }
    if (ended) complete.push_back(step);
  }
  return complete;
}

absl::StatusOr<JobTrace> CutStep(const JobDiagnosis& gathered, std::optional<int64_t> step) {
  std::optional<std::set<int64_t>> everywhere;  // complete on every answering rank
  std::vector<std::string> errors;
  for (const RankState& r : gathered.ranks()) {
    if (!r.answered()) {
      errors.push_back(absl::StrCat("rank ", r.rank(), " (", r.worker_id(), "): ", r.error()));
      continue;
    }
    const std::vector<int64_t> complete = CompleteSteps(r.recorder());
    std::set<int64_t> mine(complete.begin(), complete.end());
    if (!everywhere.has_value()) {
      everywhere = std::move(mine);
      continue;
    }
    std::set<int64_t> both;
    std::set_intersection(everywhere->begin(), everywhere->end(), mine.begin(), mine.end(),
                          std::inserter(both, both.begin()));
    everywhere = std::move(both);
  }
  if (!everywhere.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", gathered.job_id(), ": no rank answered: ", absl::StrJoin(errors, "; ")));
  }
  const std::vector<int64_t> available(everywhere->begin(), everywhere->end());
  if (available.empty()) {
    return absl::OutOfRangeError(absl::StrCat(
        "job ", gathered.job_id(),
        ": no step is complete in every rank's flight recorder yet "
        "(a step is complete once every rank has ended all of its operations and begun the "
        "next step); try again in a moment"));
  }
  const int64_t chosen = step.value_or(available.back());
  if (!everywhere->count(chosen)) {
    return absl::OutOfRangeError(absl::StrCat(
        "job ", gathered.job_id(), ": step ", chosen,
        " is not complete in every rank's flight recorder (each rank keeps its last few "
        "thousand operations); steps ",
        StepRanges(available), " are: pass one with --step"));
  }
  JobTrace trace;
  trace.set_job_id(gathered.job_id());
  trace.set_step(chosen);
  trace.set_gather_seconds(gathered.gather_seconds());
  for (int64_t s : available) trace.add_available_steps(s);
  for (const RankState& r : gathered.ranks()) {
    RankState& out = *trace.add_ranks();
    out = r;
    if (!r.answered()) continue;
    RankDiagnosis& kept = *out.mutable_recorder();
    kept.clear_entries();
    const Window w = WindowOf(r.recorder(), chosen);
    for (int i = 0; i < r.recorder().entries_size(); ++i) {
      if (InStep(r.recorder(), i, chosen, w)) *kept.add_entries() = r.recorder().entries(i);
    }
  }
  return trace;
}

absl::Status StartTrace(const Job& job,
                        const google::protobuf::RepeatedPtrField<WorkerInfo>& workers,
                        const GatherOptions& options, std::optional<int64_t> step,
                        std::function<void(absl::StatusOr<JobTrace>)> done) {
  // The schedule each rank should have run: its plan's (the plan of a running job's spec is
  // valid: it was planned at submit).
  JobTrace schedule;
  absl::StatusOr<JobPlan> plan = plan::MakeJobPlan(job.spec());
  if (plan.ok()) {
    schedule.set_schedule(plan->spec().parallel().schedule());
    schedule.set_schedule_kind(plan->schedule());
    schedule.set_micro_batches(plan->micro_batches());
    schedule.set_virtual_stages(std::max(1, plan->spec().parallel().virtual_stages()));
  }
  for (const RankAssignment& a : job.placement().ranks()) schedule.add_rank_stages(a.pp_rank());
  GatherOptions gather = options;
  gather.clock_probes = kTraceClockProbes;
  return StartGathering(
      job, workers, gather,
      [step, schedule = std::move(schedule), done = std::move(done)](JobDiagnosis gathered) {
        absl::StatusOr<JobTrace> trace = CutStep(gathered, step);
        if (trace.ok()) trace->MergeFrom(schedule);
        if (trace.ok()) trace = FitsOneMessage(*std::move(trace));
        done(std::move(trace));
      });
}

}  // namespace dtrain::coordinator
