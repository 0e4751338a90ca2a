// A JobManager under test (job_manager_test.cc, recovery_test.cc): a fresh (or given)
// database, a clock the test moves by hand, and workers driven through the RPCs.
#ifndef DTRAIN_COORDINATOR_JOB_MANAGER_HARNESS_H_
#define DTRAIN_COORDINATOR_JOB_MANAGER_HARNESS_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/job_manager.h"
#include "coordinator/test_util.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {

inline const absl::Duration kLease = absl::Seconds(5);

// A JobManager on a fresh (or given) database with a clock the test moves by hand.
class Harness {
 public:
  // `tune` changes the options the manager is made with (the clock and log stay the test's).
  explicit Harness(const std::string& db, std::function<void(JobManager::Options*)> tune = nullptr)
      : db_(db), tune_(std::move(tune)) {
    Open();
  }

  void Open() {
    manager_.reset();
    auto store = JobStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    JobManager::Options options;
    options.lease = kLease;
    options.clock = [this] {
      absl::MutexLock lock(&mu_);
      return now_;
    };
    options.log = [this](absl::string_view line) {
      absl::MutexLock lock(&mu_);
      log_.emplace_back(line);
    };
    if (tune_) tune_(&options);
    auto manager = JobManager::Create(std::move(*store), options);
    ASSERT_TRUE(manager.ok()) << manager.status();
    manager_ = std::move(*manager);
  }

  JobManager& m() { return *manager_; }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  std::string Log() {
    absl::MutexLock lock(&mu_);
    return absl::StrJoin(log_, "\n");
  }

  // `owner`: the submitting certificate's name (Job.owner).
  absl::StatusOr<Job> Submit(const std::string& json = kTinySpec, const std::string& owner = "") {
    SubmitJobRequest r;
    r.set_spec_json(json);
    absl::StatusOr<SubmitJobResponse> response = m().SubmitJob(r, absl::InfiniteFuture(), owner);
    if (!response.ok()) return response.status();
    return response->job();
  }
  absl::Status Register(const std::string& id, const std::string& session,
                        const std::string& running = "") {
    RegisterWorkerRequest r;
    r.set_worker_id(id);
    r.set_session_id(session);
    r.set_address(id + ":7071");
    r.set_host_label("host");
    r.set_running_job_id(running);
    return m().RegisterWorker(r).status();
  }
  HeartbeatResponse Beat(const std::string& id, const std::string& session,
                         const std::string& running = "") {
    HeartbeatRequest r;
    r.set_worker_id(id);
    r.set_session_id(session);
    r.set_running_job_id(running);
    absl::StatusOr<HeartbeatResponse> response = m().Heartbeat(r);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : HeartbeatResponse();
  }
  absl::StatusOr<ReportProgressResponse> Step(const std::string& id, const std::string& session,
                                              const std::string& job, int64_t step, double loss) {
    ReportProgressRequest r;
    r.set_worker_id(id);
    r.set_session_id(session);
    r.set_job_id(job);
    r.mutable_step()->set_step(step);
    r.mutable_step()->set_loss(loss);
    return m().ReportProgress(r);
  }
  absl::StatusOr<ReportProgressResponse> Outcome(const std::string& id, const std::string& session,
                                                 const std::string& job, bool ok,
                                                 const std::string& text) {
    ReportProgressRequest r;
    r.set_worker_id(id);
    r.set_session_id(session);
    r.set_job_id(job);
    r.mutable_outcome()->set_succeeded(ok);
    (ok ? r.mutable_outcome()->mutable_output() : r.mutable_outcome()->mutable_error())
        ->assign(text);
    return m().ReportProgress(r);
  }
  // Rank 0 of `job` on worker w1 reports a sealed checkpoint (and the steps retention kept).
  absl::StatusOr<ReportProgressResponse> Sealed(const std::string& job, int64_t step,
                                                const std::string& path,
                                                std::vector<int64_t> kept = {}) {
    ReportProgressRequest r;
    r.set_worker_id("w1");
    r.set_session_id("s-w1");
    r.set_job_id(job);
    r.mutable_checkpoint()->set_step(step);
    r.mutable_checkpoint()->set_path(path);
    for (int64_t k : kept) r.mutable_checkpoint()->add_kept_steps(k);
    return m().ReportProgress(r);
  }
  // w1 reports that every rank skipped the checkpoint of `step` (CheckpointSkipped).
  absl::StatusOr<ReportProgressResponse> Skipped(const std::string& job, int64_t step,
                                                 const std::string& reason) {
    ReportProgressRequest r;
    r.set_worker_id("w1");
    r.set_session_id("s-w1");
    r.set_job_id(job);
    r.mutable_checkpoint_skipped()->set_step(step);
    r.mutable_checkpoint_skipped()->set_reason(reason);
    return m().ReportProgress(r);
  }
  // A rank's failure with its kind and the peers it blames.
  absl::StatusOr<ReportProgressResponse> Failure(const std::string& id, const std::string& job,
                                                 FailureKind kind, const std::string& error,
                                                 std::vector<std::string> suspects = {}) {
    ReportProgressRequest r;
    r.set_worker_id(id);
    r.set_session_id("s-" + id);
    r.set_job_id(job);
    r.mutable_outcome()->set_error(error);
    r.mutable_outcome()->set_kind(kind);
    for (const std::string& s : suspects) r.mutable_outcome()->add_suspect_workers(s);
    return m().ReportProgress(r);
  }
  // Registers w1..wN (sessions s-w1...), submits `spec` and runs it to RUNNING on them.
  void RunOn(int n, const std::string& spec) {
    for (int i = 1; i <= n; ++i) {
      ASSERT_TRUE(Register(absl::StrCat("w", i), absl::StrCat("s-w", i)).ok());
    }
    ASSERT_TRUE(Submit(spec).ok());
    m().RunSchedulerPass();
    for (int i = 1; i <= n; ++i) Beat(absl::StrCat("w", i), absl::StrCat("s-w", i));
    for (int i = 1; i <= n; ++i) Beat(absl::StrCat("w", i), absl::StrCat("s-w", i), "job-000001");
    ASSERT_EQ(Get("job-000001").state(), RUNNING);
  }
  Job Get(const std::string& id) {
    absl::StatusOr<Job> job = m().GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : Job();
  }
  // Registers a worker and takes it through assignment to running `job`.
  void StartOn(const std::string& worker, const std::string& job) {
    m().RunSchedulerPass();
    HeartbeatResponse hb = Beat(worker, "s-" + worker);
    ASSERT_TRUE(hb.has_assignment()) << worker;
    ASSERT_EQ(hb.assignment().job_id(), job);
    Beat(worker, "s-" + worker, job);
  }

 private:
  std::string db_;
  std::function<void(JobManager::Options*)> tune_;
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1700000000);
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<JobManager> manager_;
};

inline std::vector<JobState> States(const Job& job) {
  std::vector<JobState> states;
  for (const StateChange& c : job.history()) states.push_back(c.state());
  return states;
}

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_MANAGER_HARNESS_H_
