#include "coordinator/diagnose_job.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "plan/ranks.h"
#include "proto/peer.grpc.pb.h"

namespace dtrain::coordinator {
namespace {

// One rank's call: what gRPC writes into until its callback runs.
struct RankCall {
  grpc::ClientContext context;
  DiagnoseRankRequest request;
  RankDiagnosis response;
  std::unique_ptr<PeerService::Stub> stub;
};

// Every call of one diagnosis; the last to end analyses and calls `done`.
struct Gather {
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
  JobDiagnosis gathered ABSL_GUARDED_BY(mu);
  std::vector<std::unique_ptr<RankCall>> calls;
  absl::Time start;
  DiagnosisOptions analysis;
  std::function<void(JobDiagnosis)> done;

  void Ended(int rank, const grpc::Status& status, RankDiagnosis response) {
    JobDiagnosis finished;
    {
      absl::MutexLock lock(&mu);
      RankState& r = *gathered.mutable_ranks(rank);
      if (status.ok()) {
        r.set_answered(true);
        *r.mutable_recorder() = std::move(response);
      } else {
        r.set_error(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                        ? "no answer by the deadline"
                        : status.error_message());
      }
      if (--pending > 0) return;
      gathered.set_gather_seconds(absl::ToDoubleSeconds(absl::Now() - start));
      finished = std::move(gathered);
    }
    done(Analyse(std::move(finished), analysis));
  }
};

}  // namespace

absl::Status StartDiagnosis(const Job& job,
                            const google::protobuf::RepeatedPtrField<WorkerInfo>& workers,
                            const GatherOptions& options, std::function<void(JobDiagnosis)> done) {
  if (job.state() != RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " is ", JobState_Name(job.state()),
                     ": only a RUNNING job's ranks can be asked what they do"));
  }
  const Placement& placement = job.placement();
  if (placement.ranks_size() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(),
                     " runs on one worker: it has no peers to wait on and no peer service "
                     "to ask (see dtrain status and dtrain logs)"));
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  auto gather = std::make_shared<Gather>();
  gather->start = absl::Now();
  gather->analysis = options.analysis;
  gather->analysis.deadline = options.deadline;
  gather->done = std::move(done);
  {
    absl::MutexLock lock(&gather->mu);
    gather->gathered.set_job_id(job.id());
    gather->pending = placement.ranks_size();
    for (int i = 0; i < placement.ranks_size(); ++i) {
      const RankAssignment& a = placement.ranks(i);
      RankState& r = *gather->gathered.add_ranks();
      r.set_rank(i);
      r.set_worker_id(a.worker_id());
      r.set_address(a.worker_address());
      r.set_label(plan::RankLabel(a));
      r.set_heartbeat_age_seconds(-1);
      for (const WorkerInfo& w : workers) {
        if (w.worker_id() != a.worker_id() || w.last_heartbeat_unix_ms() <= 0) continue;
        r.set_heartbeat_age_seconds(absl::ToDoubleSeconds(
            gather->start - absl::FromUnixMillis(w.last_heartbeat_unix_ms())));
      }
    }
  }
  const auto deadline = absl::ToChronoTime(gather->start + options.deadline);
  for (int i = 0; i < placement.ranks_size(); ++i) {
    auto call = std::make_unique<RankCall>();
    grpc::ChannelArguments args;
    SetPeerChannelArguments(options.tls, &args);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a stopped worker stalls only its call
    call->stub = PeerService::NewStub(
        grpc::CreateCustomChannel(placement.ranks(i).worker_address(), *credentials, args));
    call->context.set_deadline(deadline);
    call->request.set_job_id(job.id());
    call->request.set_job_secret(placement.peer_secret());
    gather->calls.push_back(std::move(call));
  }
  // Started after every call exists: a callback may run (and the last one finish) at once.
  for (int i = 0; i < placement.ranks_size(); ++i) {
    RankCall* call = gather->calls[i].get();
    call->stub->async()->Diagnose(&call->context, &call->request, &call->response,
                                  [gather, i, call](grpc::Status status) {
                                    gather->Ended(i, status, std::move(call->response));
                                  });
  }
  return absl::OkStatus();
}

}  // namespace dtrain::coordinator
