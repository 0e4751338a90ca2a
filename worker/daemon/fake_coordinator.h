// Test helpers for the worker daemon: an in-process Coordinator service that records what a
// worker sends (FakeCoordinator), a tiny job, and accessors for the reports. Test-only.
#ifndef DTRAIN_WORKER_DAEMON_FAKE_COORDINATOR_H_
#define DTRAIN_WORKER_DAEMON_FAKE_COORDINATOR_H_

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "worker/daemon/planned_for_testing.h"

namespace dtrain::worker {

inline constexpr absl::Duration kWait = absl::Seconds(30);

inline std::string TempPath(const std::string& name) {
  std::string dir = ::testing::TempDir();
  if (dir.empty() || dir.back() != '/') dir += '/';
  return dir + name;
}

inline std::string WriteText(const std::string& name, int bytes) {
  const std::string path = TempPath(name);
  std::ofstream out(path);
  const std::string words = "the quick brown fox jumps over the lazy dog; ";
  for (int i = 0; i < bytes; ++i) out << words[(i * 7 + i / 13) % words.size()];
  return path;
}

inline JobAssignment TinyJob(const std::string& job_id, const std::string& dataset, int64_t steps) {
  JobAssignment a;
  a.set_job_id(job_id);
  a.set_job_uid(absl::StrCat("uid-", job_id));
  JobSpec* spec = a.mutable_spec();
  spec->set_name("tiny");
  ModelConfig* m = spec->mutable_model();
  m->set_vocab_size(256);
  m->set_context(16);
  m->set_n_layer(2);
  m->set_n_head(2);
  m->set_n_embd(16);
  spec->set_dataset(dataset);
  spec->set_steps(steps);
  spec->set_batch_size(2);
  spec->set_seq_len(16);
  spec->mutable_optimizer()->set_lr(1e-2f);
  a.mutable_rank()->set_worker_id("w1");
  return a;
}

// The coordinator's worker-facing half, recording what it is sent. A session it has not
// registered (after a "restart": a fresh FakeCoordinator) gets register_again / NOT_FOUND. A
// deregistered session gets register_again in heartbeats but may still report its job (its
// outcome), as the real coordinator allows.
class FakeCoordinator final : public Coordinator::Service {
 public:
  grpc::Status RegisterWorker(grpc::ServerContext*, const RegisterWorkerRequest* request,
                              RegisterWorkerResponse* response) override {
    absl::MutexLock lock(&mu_);
    registrations_.push_back(*request);
    if (!refuse_registrations_.ok()) return refuse_registrations_;
    sessions_.insert(request->session_id());
    response->set_heartbeat_interval_ms(20);
    response->set_lease_ms(1000);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest* request,
                         HeartbeatResponse* response) override {
    absl::MutexLock lock(&mu_);
    heartbeats_.push_back(*request);
    if (hold_next_heartbeat_) {
      hold_next_heartbeat_ = false;
      heartbeat_held_ = true;
      auto deregistered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !deregistrations_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&deregistered), absl::Seconds(10));
    }
    if (request->dirs_removed_size() > 0 && heartbeats_with_answers_to_fail_ > 0) {
      --heartbeats_with_answers_to_fail_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "answers lost on the way");
    }
    // Answers count whatever the session, as the coordinator's do.
    for (const JobDirRemoved& answer : request->dirs_removed()) {
      dirs_removed_.push_back(answer);
      remove_dirs_.erase(std::remove_if(remove_dirs_.begin(), remove_dirs_.end(),
                                        [&](const AskedRemoval& r) {
                                          return r.removal.job_id() == answer.job_id();
                                        }),
                         remove_dirs_.end());
    }
    if (sessions_.count(request->session_id()) == 0 ||
        deregistered_sessions_.count(request->session_id()) > 0) {
      response->set_register_again(true);
      return grpc::Status::OK;
    }
    if (!assignments_.empty()) {
      *response->mutable_assignment() = assignments_.front();
      assignments_.erase(assignments_.begin());
    }
    for (const std::string& id : cancel_) {
      response->add_cancel_job_ids(id);
      if (cancel_sent_at_ < 0) cancel_sent_at_ = heartbeats_.size();
    }
    for (const AskedRemoval& r : remove_dirs_) *response->add_remove_dirs() = r.removal;
    remove_dirs_.erase(std::remove_if(remove_dirs_.begin(), remove_dirs_.end(),
                                      [](const AskedRemoval& r) { return !r.until_answered; }),
                       remove_dirs_.end());
    return grpc::Status::OK;
  }

  grpc::Status ReportProgress(grpc::ServerContext*, const ReportProgressRequest* request,
                              ReportProgressResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (sessions_.count(request->session_id()) == 0) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown session");
    }
    if (request->has_outcome() && internal_answers_left_ > 0) {
      --internal_answers_left_;
      return grpc::Status(grpc::StatusCode::INTERNAL, "");
    }
    if (request->has_steps() && refuse_step_runs_) {
      ++step_runs_refused_;
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "report carries none of step, event, outcome");
    }
    if (answers_left_ > 0) {
      --answers_left_;
      ++answered_;
      return answer_;
    }
    if (request->job_id() == reject_job_) {
      ++rejected_;
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "job is not assigned to you");
    }
    reports_.push_back(*request);
    if (heartbeats_at_first_report_ < 0) heartbeats_at_first_report_ = heartbeats_.size();
    response->set_cancelled(request->job_id() == cancel_in_reports_);
    if (answers_to_lose_ > 0) {  // recorded, but the worker never hears so
      --answers_to_lose_;
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");
    }
    return grpc::Status::OK;
  }

  grpc::Status DeregisterWorker(grpc::ServerContext*, const DeregisterWorkerRequest* request,
                                DeregisterWorkerResponse*) override {
    absl::MutexLock lock(&mu_);
    deregistrations_.push_back(
        {*request, reports_.size(), registrations_.size(), heartbeats_.size()});
    if (!refuse_deregistrations_.ok()) return refuse_deregistrations_;
    deregistered_sessions_.insert(request->session_id());
    return grpc::Status::OK;
  }
  // The next heartbeat waits (up to 10 s) for a deregistration before it is answered: a
  // heartbeat in flight while the worker leaves. heartbeat_held_locked() says it is waiting.
  void HoldNextHeartbeatUntilDeregistered() {
    absl::MutexLock lock(&mu_);
    hold_next_heartbeat_ = true;
  }
  bool heartbeat_held_locked() const { return heartbeat_held_; }
  // Answers every deregistration with `status` (e.g. UNIMPLEMENTED: an older coordinator).
  void RefuseDeregistrations(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    refuse_deregistrations_ = std::move(status);
  }

  // A DeregisterWorker call and how many reports, registrations and heartbeats came before it.
  struct Deregistration {
    DeregisterWorkerRequest request;
    size_t reports_before = 0;
    size_t registrations_before = 0;
    size_t heartbeats_before = 0;
  };

  // Sends `a` planned as the coordinator sends it (PlannedIfValidForTesting).
  void Assign(const JobAssignment& a) {
    absl::MutexLock lock(&mu_);
    assignments_.push_back(PlannedIfValidForTesting(a));
  }
  void Cancel(const std::string& job_id) {
    absl::MutexLock lock(&mu_);
    cancel_.push_back(job_id);
  }

  // Asks the worker to remove a deleted job's directory in the next heartbeat answer; with
  // `until_answered`, in every answer until a heartbeat carries its dirs_removed.
  void RemoveDir(const JobDirRemoval& removal, bool until_answered) {
    absl::MutexLock lock(&mu_);
    remove_dirs_.push_back({removal, until_answered});
  }

  // Fails the next `n` heartbeats that carry dirs_removed with UNAVAILABLE, their answers not
  // taken.
  void FailHeartbeatsWithAnswers(int n) {
    absl::MutexLock lock(&mu_);
    heartbeats_with_answers_to_fail_ = n;
  }

  // Answers the job's reports with cancelled = true.
  void CancelInReports(const std::string& job_id) {
    absl::MutexLock lock(&mu_);
    cancel_in_reports_ = job_id;
  }
  // Refuses the job's reports with FAILED_PRECONDITION (a coordinator that lost the job).
  void RejectReportsOf(const std::string& job_id) {
    absl::MutexLock lock(&mu_);
    reject_job_ = job_id;
  }
  // Answers the next `n` outcomes with an empty INTERNAL (what gRPC answers to a request the
  // server cannot parse).
  void AnswerInternalToOutcomes(int n) {
    absl::MutexLock lock(&mu_);
    internal_answers_left_ = n;
  }
  // Answers a report of several steps (StepRun) as a coordinator before that format does:
  // INVALID_ARGUMENT, no report set.
  void RefuseStepRuns() {
    absl::MutexLock lock(&mu_);
    refuse_step_runs_ = true;
  }
  // Answers the next `n` reports with `status` (e.g. DATA_LOSS: a coordinator whose database
  // is damaged), recording none of them.
  void AnswerReportsWith(grpc::Status status, int n) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(status);
    answers_left_ = n;
  }
  // Records the next `n` reports but answers each DEADLINE_EXCEEDED, as if the answer were lost
  // on the way: the worker sends them again (reports() then holds the copies too).
  void LoseAnswers(int n) {
    absl::MutexLock lock(&mu_);
    answers_to_lose_ = n;
  }
  int answered() const {
    absl::MutexLock lock(&mu_);
    return answered_;
  }
  // Answers every registration with `status` (e.g. ALREADY_EXISTS); OK: accept again.
  void RefuseRegistrations(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    refuse_registrations_ = std::move(status);
  }
  // As if the worker's lease had expired: its session is unknown from now on.
  void ForgetSessions() {
    absl::MutexLock lock(&mu_);
    sessions_.clear();
  }

  // Waits until `done` (evaluated under the lock) holds; false on timeout.
  bool WaitUntil(const std::function<bool(FakeCoordinator&)>& done) {
    absl::MutexLock lock(&mu_);
    auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done(*this); };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), kWait);
  }

  // Accessors for WaitUntil predicates (called under the lock) and for checks afterwards.
  std::vector<RegisterWorkerRequest> registrations() const {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  std::vector<HeartbeatRequest> heartbeats() const {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  std::vector<ReportProgressRequest> reports() const {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  std::vector<Deregistration> deregistrations() const {
    absl::MutexLock lock(&mu_);
    return deregistrations_;
  }
  // Every JobDirRemoved heartbeats carried, in order (a resent one again).
  std::vector<JobDirRemoved> dirs_removed() const {
    absl::MutexLock lock(&mu_);
    return dirs_removed_;
  }

  // Unlocked views for predicates passed to WaitUntil.
  const std::vector<RegisterWorkerRequest>& registrations_locked() const { return registrations_; }
  const std::vector<HeartbeatRequest>& heartbeats_locked() const { return heartbeats_; }
  const std::vector<ReportProgressRequest>& reports_locked() const { return reports_; }
  const std::vector<JobDirRemoved>& dirs_removed_locked() const { return dirs_removed_; }
  int64_t cancel_sent_at_locked() const { return cancel_sent_at_; }
  int step_runs_refused() const {
    absl::MutexLock lock(&mu_);
    return step_runs_refused_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<RegisterWorkerRequest> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<ReportProgressRequest> reports_ ABSL_GUARDED_BY(mu_);
  int answers_to_lose_ ABSL_GUARDED_BY(mu_) = 0;
  bool refuse_step_runs_ ABSL_GUARDED_BY(mu_) = false;
  int step_runs_refused_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> sessions_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> deregistered_sessions_ ABSL_GUARDED_BY(mu_);
  bool hold_next_heartbeat_ ABSL_GUARDED_BY(mu_) = false;
  bool heartbeat_held_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Deregistration> deregistrations_ ABSL_GUARDED_BY(mu_);
  std::vector<JobAssignment> assignments_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cancel_ ABSL_GUARDED_BY(mu_);
  struct AskedRemoval {
    JobDirRemoval removal;
    bool until_answered = false;
  };
  std::vector<AskedRemoval> remove_dirs_ ABSL_GUARDED_BY(mu_);
  std::vector<JobDirRemoved> dirs_removed_ ABSL_GUARDED_BY(mu_);
  int heartbeats_with_answers_to_fail_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cancel_sent_at_ ABSL_GUARDED_BY(mu_) = -1;  // heartbeat count when first sent
  std::string cancel_in_reports_ ABSL_GUARDED_BY(mu_);
  std::string reject_job_ ABSL_GUARDED_BY(mu_);
  int internal_answers_left_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status answer_ ABSL_GUARDED_BY(mu_);
  int answers_left_ ABSL_GUARDED_BY(mu_) = 0;
  int answered_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status refuse_registrations_ ABSL_GUARDED_BY(mu_);
  grpc::Status refuse_deregistrations_ ABSL_GUARDED_BY(mu_);
  int rejected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t heartbeats_at_first_report_ ABSL_GUARDED_BY(mu_) = -1;

 public:
  int rejected_locked() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return rejected_; }
  // A heartbeat arrived after the first report was answered: the worker has acted on the answer.
  bool first_report_processed_locked() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return heartbeats_at_first_report_ >= 0 &&
           static_cast<int64_t>(heartbeats_.size()) > heartbeats_at_first_report_;
  }
};

inline std::unique_ptr<grpc::Server> StartServer(FakeCoordinator* service, int* port) {
  grpc::ServerBuilder builder;
  int selected = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", *port), grpc::InsecureServerCredentials(),
                           &selected);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  *port = selected;
  return server;
}

inline bool HasOutcome(const FakeCoordinator& f) {
  for (const auto& r : f.reports_locked()) {
    if (r.has_outcome()) return true;
  }
  return false;
}

inline JobOutcome OutcomeOf(const std::vector<ReportProgressRequest>& reports) {
  for (const auto& r : reports) {
    if (r.has_outcome()) return r.outcome();
  }
  return JobOutcome();
}

inline std::vector<int64_t> StepsOf(const std::vector<ReportProgressRequest>& reports) {
  std::vector<int64_t> steps;
  for (const auto& r : reports) {
    if (r.has_step()) steps.push_back(r.step().step());
    for (const StepMetrics& m : r.steps().steps()) steps.push_back(m.step());
  }
  return steps;
}

inline std::vector<int64_t> Range(int64_t first, int64_t last) {
  std::vector<int64_t> v;
  for (int64_t i = first; i <= last; ++i) v.push_back(i);
  return v;
}

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_FAKE_COORDINATOR_H_
