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

// One rank's calls, one after the other: `probes` clock probes, then its recorder. gRPC writes
// into `context` and `response` until the current call's callback runs.
struct RankCall {
  std::unique_ptr<PeerService::Stub> stub;
  DiagnoseRankRequest request;
  std::unique_ptr<grpc::ClientContext> context;
  RankDiagnosis response;
  int probes_left = 0;
  absl::Time sent;
  // The best clock estimate so far (shortest round trip); error -1: none yet.
  int64_t offset_ns = 0;
  int64_t error_ns = -1;

  // NTP-style: the rank's clock read `now` while the call was in flight, best guess half-way.
  void Estimate(absl::Time received, int64_t rank_now_ns) {
    const int64_t sent_ns = absl::ToUnixNanos(sent);
    const int64_t received_ns = absl::ToUnixNanos(received);
    const int64_t half_trip = (received_ns - sent_ns) / 2;
    if (error_ns >= 0 && half_trip >= error_ns) return;
    error_ns = half_trip;
    offset_ns = rank_now_ns - (sent_ns + half_trip);
  }
};

// Every call of one gathering; the last rank to end calls `done`.
struct Gather : std::enable_shared_from_this<Gather> {
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
  JobDiagnosis gathered ABSL_GUARDED_BY(mu);
  std::vector<std::unique_ptr<RankCall>> calls;
  absl::Time start;
  absl::Time deadline;
  std::function<void(JobDiagnosis)> done;

  // Starts rank `rank`'s next call: a clock probe while any are left, else its recorder.
  void Call(int rank) {
    RankCall* call = calls[rank].get();
    call->context = std::make_unique<grpc::ClientContext>();
    call->context->set_deadline(absl::ToChronoTime(deadline));
    call->request.set_clock_only(call->probes_left > 0);
    call->response.Clear();
    call->sent = absl::Now();
    call->stub->async()->Diagnose(
        call->context.get(), &call->request, &call->response,
        [self = shared_from_this(), rank](grpc::Status status) { self->Answered(rank, status); });
  }

  void Answered(int rank, const grpc::Status& status) {
    RankCall* call = calls[rank].get();
    if (status.ok()) call->Estimate(absl::Now(), call->response.now_unix_ns());
    if (status.ok() && call->probes_left > 0) {
      --call->probes_left;
      Call(rank);
      return;
    }
    JobDiagnosis finished;
    {
      absl::MutexLock lock(&mu);
      RankState& r = *gathered.mutable_ranks(rank);
      if (status.ok()) {
        r.set_answered(true);
        r.set_clock_offset_ns(call->offset_ns);
        r.set_clock_error_ns(call->error_ns);
        *r.mutable_recorder() = std::move(call->response);
      } else {
        r.set_error(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                        ? "no answer by the deadline"
                        : status.error_message());
      }
      if (--pending > 0) return;
      gathered.set_gather_seconds(absl::ToDoubleSeconds(absl::Now() - start));
      finished = std::move(gathered);
    }
    done(std::move(finished));
  }
};

}  // namespace

absl::Status StartGathering(const Job& job,
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
  gather->deadline = gather->start + options.deadline;
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
  for (int i = 0; i < placement.ranks_size(); ++i) {
    auto call = std::make_unique<RankCall>();
    grpc::ChannelArguments args;
    SetPeerChannelArguments(options.tls, &args);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a stopped worker stalls only its call
    call->stub = PeerService::NewStub(
        grpc::CreateCustomChannel(placement.ranks(i).worker_address(), *credentials, args));
    call->request.set_job_id(job.id());
    call->request.set_job_secret(placement.peer_secret());
    call->probes_left = options.clock_probes;
    gather->calls.push_back(std::move(call));
  }
  // Started after every call exists: a callback may run (and the last one finish) at once.
  for (int i = 0; i < placement.ranks_size(); ++i) gather->Call(i);
  return absl::OkStatus();
}

absl::Status StartDiagnosis(const Job& job,
                            const google::protobuf::RepeatedPtrField<WorkerInfo>& workers,
                            const GatherOptions& options, std::function<void(JobDiagnosis)> done) {
  DiagnosisOptions analysis = options.analysis;
  analysis.deadline = options.deadline;
  return StartGathering(job, workers, options,
                        [analysis, done = std::move(done)](JobDiagnosis gathered) {
                          done(Analyse(std::move(gathered), analysis));
                        });
}

}  // namespace dtrain::coordinator
