// Deleting ended jobs: by request (DeleteJob) and by age (Options::ended_job_retention), and
// the removal of their directories through the workers' heartbeats (dir_removals.h).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/job_paths.h"
#include "common/path_policy.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"

namespace dtrain::coordinator {
namespace {

// The retention sweep runs at most this often, and deletes at most this many jobs a sweep.
constexpr absl::Duration kRetentionEvery = absl::Minutes(1);
constexpr int kRetentionBatch = 100;

}  // namespace

absl::Status JobManager::CheckNotInUse(const Job& job) {
  // Its directory, and where its sealed steps are (a job that never reported its directory).
  std::vector<std::string> dirs;
  if (!job.checkpoint().dir().empty()) dirs.push_back(job.checkpoint().dir());
  if (absl::StatusOr<std::vector<CheckpointInfo>> sealed = store_->Checkpoints(job.id());
      sealed.ok()) {
    for (const CheckpointInfo& c : *sealed) dirs.push_back(c.path());
  }
  for (const auto& [n, other] : jobs_) {
    for (const std::string* path : {&other.spec.resume_from(), &other.spec.init_checkpoint()}) {
      if (path->empty()) continue;
      const std::string absolute = AbsolutePath(*path);
      for (const std::string& dir : dirs) {
        if (!IsInsideRoot(absolute, dir)) continue;
        return absl::FailedPreconditionError(absl::StrCat(
            other.id, " (", JobState_Name(other.state), ") ",
            path == &other.spec.resume_from() ? "resumes" : "starts", " from ", *path, ", in ",
            job.id(), "'s directory: delete ", job.id(), " once ", other.id, " has ended"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<PendingDirRemoval>> JobManager::DeleteLocked(const Job& job,
                                                                          bool files,
                                                                          absl::string_view why) {
  if (!IsFinal(job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(job.id(), " is ", JobState_Name(job.state()),
                                                      ": cancel it first (`dtrain cancel ",
                                                      job.id(), "`), then delete it"));
  }
  RETURN_IF_ERROR(CheckNotInUse(job));
  std::optional<PendingDirRemoval> removal;
  const std::string rank0 =
      job.placement().ranks_size() > 0 ? job.placement().ranks(0).worker_id() : "";
  // A job that was placed but ended before its rank 0 reported its directory may still have
  // claimed it: the worker that ran rank 0 resolves where from the spec.
  const bool unreported = job.checkpoint().dir().empty() && !rank0.empty();
  if (files && (!job.checkpoint().dir().empty() || unreported)) {
    removal.emplace();
    removal->job_id = job.id();
    removal->uid = job.uid();
    removal->dir = job.checkpoint().dir();
    removal->spec_dir = unreported ? job.spec().checkpoint().dir() : "";
    removal->host = job.checkpoint().host();
    removal->worker_id = rank0;
    removal->requested_ms = NowMs();
  }
  RETURN_IF_ERROR(store_->DeleteJob(job.id(), removal.has_value() ? &*removal : nullptr));
  std::string line =
      absl::StrCat(job.id(), ": deleted (", why, "; it was ", JobState_Name(job.state()), ")");
  if (removal.has_value()) {
    removals_.Add(*removal);
    absl::StrAppend(
        &line, "; its directory ",
        removal->dir.empty()
            ? absl::StrCat("(never reported; where the spec puts it: ",
                           JobDirectory(removal->spec_dir, job.id(), "<its --data_root>"), ")")
            : absl::StrCat(removal->dir, " on ", removal->host),
        " goes next (worker ", removal->worker_id.empty() ? "any there" : removal->worker_id, ")");
  } else if (!job.checkpoint().dir().empty()) {
    absl::StrAppend(&line, "; its directory ", job.checkpoint().dir(), " on ",
                    job.checkpoint().host(), " stays");
  }
  Log(line);
  if (options_.metrics != nullptr) options_.metrics->JobDeleted();
  return removal;
}

void JobManager::DeleteJob(const DeleteJobRequest& request, absl::Time deadline,
                           std::function<void(absl::StatusOr<DeleteJobResponse>)> done) {
  if (request.job_id().empty()) return done(absl::InvalidArgumentError("job_id is empty"));
  std::optional<PendingDirRemoval> removal;
  DeleteJobResponse response;
  absl::Status deleted;
  {
    JobsLock lock(this);
    absl::StatusOr<Job> job = store_->GetJob(request.job_id(), /*with_history=*/false);
    absl::StatusOr<std::optional<PendingDirRemoval>> queued =
        job.ok() ? DeleteLocked(*job, request.files(), "dtrain delete") : job.status();
    deleted = queued.status();
    if (deleted.ok()) {
      removal = *std::move(queued);
      *response.mutable_job() = *std::move(job);
    }
  }
  if (!deleted.ok()) return done(deleted);  // (answered without the lock held)
  if (!removal.has_value()) return done(std::move(response));
  // The worker removes it at its next heartbeat: wait a few of them, within the caller's time,
  // holding no thread (the answer's heartbeat or a scheduler pass calls back).
  const absl::Time until = std::min(deadline - absl::Milliseconds(200),
                                    absl::Now() + 3 * registry_.pace().interval + absl::Seconds(2));
  removals_.OnAnswer(
      removal->job_id, until,
      [this, removal = *removal, response = std::move(response),
       done = std::move(done)](std::optional<JobDirRemoved> answer) mutable {
        JobDirRemoved* files = response.mutable_files();
        if (answer.has_value()) {
          *files = *std::move(answer);
        } else {
          files->set_job_id(removal.job_id);
          files->set_dir(!removal.dir.empty()
                             ? removal.dir
                             : JobDirectory(removal.spec_dir, removal.job_id, "<its --data_root>"));
          files->set_host(removal.host);
          files->set_state(DIR_REMOVAL_PENDING);
          files->set_worker_id(removals_.AskedOf(removal.job_id));
        }
        done(std::move(response));
      });
}

absl::StatusOr<DeleteJobResponse> JobManager::DeleteJob(const DeleteJobRequest& request,
                                                        absl::Time deadline) {
  absl::Notification answered;
  absl::StatusOr<DeleteJobResponse> result;
  DeleteJob(request, deadline, [&](absl::StatusOr<DeleteJobResponse> r) {
    result = std::move(r);
    answered.Notify();
  });
  // Without the scheduler thread (tests) the wait's end is checked here.
  while (!answered.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    removals_.ExpireWaiters(absl::Now());
  }
  return result;
}

bool JobManager::FinishDirRemoval(const JobDirRemoved& answer) {
  std::optional<PendingDirRemoval> done = removals_.Answer(answer);
  if (!done.has_value()) return false;  // answered before (a heartbeat sent again)
  absl::Status stored = store_->DirRemovalDone(done->job_id);
  Log(absl::StrCat(done->job_id, " (deleted): ", plan::DescribeDirRemoval(answer),
                   stored.ok() ? "" : absl::StrCat(" (not recorded: ", stored.ToString(), ")")));
  if (options_.metrics != nullptr) options_.metrics->DirRemoved(answer.state(), answer.bytes());
  return true;
}

void JobManager::TakeDirRemovals(const HeartbeatRequest& request, HeartbeatResponse* response) {
  for (const JobDirRemoved& answer : request.dirs_removed()) {
    FinishDirRemoval(answer);
  }
  if (removals_.empty() || response->register_again()) return;
  for (JobDirRemoval& r : removals_.ForWorker(request.worker_id(), Now())) {
    *response->add_remove_dirs() = std::move(r);
  }
}

absl::Status JobManager::RestoreDirRemovals() {
  ASSIGN_OR_RETURN(std::vector<PendingDirRemoval> pending, store_->PendingDirRemovals());
  for (const PendingDirRemoval& r : pending) removals_.Add(r);
  if (!pending.empty()) {
    Log(absl::StrCat(pending.size(), " deleted jobs' directories still to remove (the first: ",
                     pending.front().dir, " on ", pending.front().host, ")"));
  }
  return absl::OkStatus();
}

void JobManager::DeleteExpiredLocked(absl::Time now) {
  if (options_.ended_job_retention <= absl::ZeroDuration() ||
      now - retention_swept_ < kRetentionEvery) {
    return;
  }
  retention_swept_ = now;
  absl::StatusOr<std::vector<std::string>> ids =
      store_->EndedBefore(absl::ToUnixMillis(now - options_.ended_job_retention), kRetentionBatch);
  if (!ids.ok()) {
    Log(absl::StrCat("ended-job retention: cannot list the jobs: ", ids.status().ToString()));
    return;
  }
  const std::string why = absl::StrCat("ended more than --ended_job_retention (",
                                       absl::FormatDuration(options_.ended_job_retention), ") ago");
  for (const std::string& id : *ids) {
    absl::StatusOr<Job> job = store_->GetJob(id, /*with_history=*/false);
    absl::Status deleted = job.status();
    if (job.ok()) deleted = DeleteLocked(*job, /*files=*/true, why).status();
    // A job whose checkpoints a queued or running job uses waits for the next sweep.
    if (!deleted.ok() && !absl::IsFailedPrecondition(deleted)) {
      Log(absl::StrCat(id, ": not deleted by the retention: ", deleted.ToString()));
    }
  }
}

}  // namespace dtrain::coordinator
