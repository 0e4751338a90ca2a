#include "worker/daemon/parallel_job.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "proto/peer.grpc.pb.h"
#include "worker/comm/grpc/grpc_transport.h"

namespace dtrain::worker {
namespace {

// A channel used only to learn whether `address` accepts connections; reconnects as often as
// the transport's own channels.
std::shared_ptr<grpc::Channel> ProbeChannel(const std::string& address, const TlsFiles& tls) {
  grpc::ChannelArguments args;
  SetPeerChannelArguments(tls, &args);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = ChannelCredentials(tls);
  // Files that became unreadable: the transport's own channel says so; this one never connects.
  return grpc::CreateCustomChannel(
      address, credentials.ok() ? *credentials : grpc::InsecureChannelCredentials(), args);
}

// What the peer service at the end of `channel` serves, asked with this run's job id and secret
// (a clock-only Diagnose: nothing is created on the peer): OK for this run; PermissionDenied
// or FailedPrecondition while it serves another run (the previous job of its worker, not left
// yet); any other error (Unavailable: it is shutting down) says nothing either way.
absl::Status AskWhatItServes(const std::shared_ptr<grpc::Channel>& channel,
                             const std::string& job_id, const std::string& secret,
                             absl::Time deadline) {
  auto stub = PeerService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  DiagnoseRankRequest request;
  request.set_job_id(job_id);
  request.set_job_secret(secret);
  request.set_clock_only(true);
  RankDiagnosis answer;
  const grpc::Status s = stub->Diagnose(&context, request, &answer);
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

bool ServesAnotherRun(const absl::Status& s) {
  return absl::IsPermissionDenied(s) || absl::IsFailedPrecondition(s);
}

// ParallelTrainingOptions.rank_hosts from the coordinator's choice of dp all-reduce
// (JobAssignment.dp_host_index): a name per host number for the members of `rank`'s dp group,
// the only entries the trainer reads; empty (the flat ring) when the coordinator chose that.
std::vector<std::string> DpRankHosts(const JobAssignment& assignment, int rank) {
  const ParallelLayout& layout = assignment.spec().parallel();
  if (assignment.dp_host_index().empty()) return {};
  std::vector<std::string> hosts(plan::WorkersNeeded(layout));
  RankAssignment member = RankCoordinates(layout, rank);
  for (int d = 0; d < assignment.dp_host_index_size(); ++d) {
    member.set_dp_rank(d);
    hosts[plan::RankIndex(layout, member)] = absl::StrCat("host ", assignment.dp_host_index(d));
  }
  return hosts;
}

}  // namespace

absl::StatusOr<int> FindRank(const JobAssignment& assignment, const std::string& worker_id) {
  const ParallelLayout& layout = assignment.spec().parallel();
  const int n = static_cast<int>(plan::WorkersNeeded(layout));
  const Placement& placement = assignment.placement();
  const std::string what =
      absl::StrFormat("job %s (dp=%d pp=%d tp=%d)", assignment.job_id(), std::max(1, layout.dp()),
                      std::max(1, layout.pp()), std::max(1, layout.tp()));
  absl::flat_hash_map<std::string, int> by_address;
  absl::flat_hash_set<int> listed;
  int mine = -1, previous = -1;
  for (int i = 0; i < placement.ranks_size(); ++i) {
    const RankAssignment& r = placement.ranks(i);
    const int index = plan::RankIndex(layout, r);
    if (r.dp_rank() < 0 || r.pp_rank() < 0 || r.tp_rank() < 0 || index >= n ||
        r.pp_rank() >= std::max(1, layout.pp()) || r.tp_rank() >= std::max(1, layout.tp()) ||
        index <= previous) {
      return absl::FailedPreconditionError(absl::StrCat("placement entry ", i, " of ", what, " is ",
                                                        plan::RankLabel(r),
                                                        ", out of (dp, pp, tp) order"));
    }
    previous = index;
    listed.insert(index);
    if (r.worker_id().empty() || r.worker_address().empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", index, " of ", what, " has no worker id or no address (worker \"",
                       r.worker_id(), "\", address \"", r.worker_address(), "\")"));
    }
    auto [it, inserted] = by_address.emplace(r.worker_address(), i);
    if (!inserted) {
      const RankAssignment& other = placement.ranks(it->second);
      return absl::FailedPreconditionError(absl::StrCat(
          "ranks ", plan::RankIndex(layout, other), " (worker ", other.worker_id(), ") and ", index,
          " (worker ", r.worker_id(), ") of ", what, " have the same peer address ",
          r.worker_address(), ": every worker needs its own --advertise_address"));
    }
    if (r.worker_id() == worker_id) {
      if (mine >= 0) {
        return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " holds ranks ",
                                                          mine, " and ", index, " of ", what));
      }
      mine = index;
    }
  }
  if (mine < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the placement of ", what, " gives no rank to worker ", worker_id));
  }
  if (assignment.has_rank() && plan::RankIndex(layout, assignment.rank()) != mine) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", worker_id, " is assigned ", plan::RankLabel(assignment.rank()), " of ", what,
        " but the placement puts it at ", plan::RankLabel(RankCoordinates(layout, mine))));
  }
  const int dp = std::max(1, layout.dp());
  if (!assignment.dp_host_index().empty() && assignment.dp_host_index_size() != dp) {
    return absl::FailedPreconditionError(absl::StrCat("the assignment of ", what, " gives ",
                                                      assignment.dp_host_index_size(),
                                                      " dp hosts for dp=", dp));
  }
  std::vector<std::string> missing;
  for (int peer : plan::PeerRanks(layout, mine, assignment.dp_host_index())) {
    if (!listed.contains(peer)) missing.push_back(absl::StrCat(peer));
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the assignment of ", what, " lists ", placement.ranks_size(), " ranks but not rank ", mine,
        "'s peer", missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", ")));
  }
  return mine;
}

Placement PlacementByRank(const JobAssignment& assignment) {
  const ParallelLayout& layout = assignment.spec().parallel();
  const int n = static_cast<int>(plan::WorkersNeeded(layout));
  Placement all;
  all.set_peer_secret(assignment.placement().peer_secret());
  for (int r = 0; r < n; ++r) *all.add_ranks() = RankCoordinates(layout, r);
  for (const RankAssignment& r : assignment.placement().ranks()) {
    const int index = plan::RankIndex(layout, r);
    if (index >= 0 && index < n) *all.mutable_ranks(index) = r;
  }
  return all;
}

absl::StatusOr<parallel::ParallelTrainingOptions> ParallelPlan(const JobAssignment& assignment,
                                                               int rank, TrainingRun run,
                                                               absl::Duration comm_timeout) {
  const RankPlan& planned = assignment.rank_plan();
  if (planned.rank() != rank) {
    return absl::FailedPreconditionError(
        absl::StrCat("the plan of job ", assignment.job_id(), " was made for rank ", planned.rank(),
                     " but the placement puts this worker at rank ", rank));
  }
  parallel::ParallelTrainingOptions o;
  o.run = std::move(run);
  o.plan = planned;
  o.rank_hosts = DpRankHosts(assignment, rank);
  o.comm_timeout = comm_timeout;
  return o;
}

ParallelJob::ParallelJob(const JobAssignment& assignment, int rank, ParallelJobOptions options)
    : job_id_(assignment.job_id()),
      placement_(PlacementByRank(assignment)),
      rank_(rank),
      size_(placement_.ranks_size()),
      peers_(rank >= 0 && rank < size_
                 ? plan::PeerRanks(assignment.spec().parallel(), rank, assignment.dp_host_index())
                 : std::vector<int>()),
      options_(std::move(options)) {}

ParallelJob::~ParallelJob() {
  Close(absl::ZeroDuration());
  std::thread abort_thread;
  {
    absl::MutexLock lock(&mu_);
    abort_thread = std::move(abort_thread_);
  }
  if (abort_thread.joinable()) abort_thread.join();
  trainer_.reset();
  absl::MutexLock lock(&mu_);
  transport_.reset();
}

std::shared_ptr<comm::GrpcTransport> ParallelJob::transport() const {
  absl::MutexLock lock(&mu_);
  return transport_;
}

bool ParallelJob::aborted() const {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

void ParallelJob::Abort() {
  absl::MutexLock lock(&mu_);
  if (aborted_) return;
  aborted_ = true;
  if (transport_ == nullptr || closed_) return;
  closed_ = true;
  // Shutdown waits for gRPC (server shutdown, streams closing): not on the caller's thread,
  // which may hold the daemon's lock.
  abort_thread_ = std::thread([t = transport_] { t->Shutdown(absl::ZeroDuration()); });
}

void ParallelJob::Close(absl::Duration grace) {
  std::shared_ptr<comm::GrpcTransport> t;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || transport_ == nullptr) return;
    closed_ = true;
    t = transport_;
  }
  t->Shutdown(grace);
}

absl::Status ParallelJob::Connect() {
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  std::vector<std::string> addresses;
  for (const RankAssignment& r : placement_.ranks()) addresses.push_back(r.worker_address());
  comm::GrpcTransportOptions o;
  o.rank = rank_;
  o.size = size_;
  o.peer_addresses = addresses;
  // Errors of the transport name peers by worker where they are made (SuspectPeers reads them).
  for (int r = 0; r < size_; ++r) o.peer_names.push_back(plan::DescribeRank(placement_, r));
  o.listen_address = options_.listen_address;
  o.job_id = job_id_;
  o.job_secret = placement_.peer_secret();
  o.on_refused = options_.on_refused;
  o.on_data_path = options_.on_data_path;
  o.shared_memory = options_.shared_memory;
  o.data_connections = options_.data_connections;
  o.data_port = options_.data_port;
  o.recorder = &recorder_;
  o.tls = options_.tls;
  // Another process listening on this port is an error, not a port to share.
  o.channel_args.push_back({GRPC_ARG_ALLOW_REUSEPORT, 0});
  absl::StatusOr<std::unique_ptr<comm::GrpcTransport>> started = comm::GrpcTransport::Start(o);
  if (!started.ok()) {
    return Annotate(
        started.status(),
        absl::StrCat("cannot start the peer service of ", plan::DescribeRank(placement_, rank_),
                     " (is another process using the port of --advertise_address or "
                     "--peer_listen?)"));
  }
  std::shared_ptr<comm::GrpcTransport> t = std::move(*started);
  bool aborted;
  {
    absl::MutexLock lock(&mu_);
    transport_ = t;
    aborted = aborted_;
    if (aborted) closed_ = true;
  }
  if (aborted) {
    t->Shutdown(absl::ZeroDuration());
    return absl::CancelledError("aborted while starting the peer service");
  }
  for (int peer : peers_) RETURN_IF_ERROR(ConnectTo(peer, deadline));
  return absl::OkStatus();
}

absl::Status ParallelJob::ConnectTo(int peer, absl::Time deadline) {
  const absl::Time start = absl::Now();
  std::shared_ptr<grpc::Channel> probe =
      ProbeChannel(placement_.ranks(peer).worker_address(), options_.tls);
  absl::Status other_run;  // the last refusal of a peer service that serves another run
  while (true) {
    if (aborted()) return absl::CancelledError("aborted while connecting to the peers");
    const grpc_connectivity_state state = probe->GetState(/*try_to_connect=*/true);
    const absl::Time now = absl::Now();
    if (state == GRPC_CHANNEL_READY) {
      // Its worker may not have left its previous job yet: that job's peer service, still up
      // on the same address, would refuse this run's HELLO. Wait until it serves this run.
      other_run = AskWhatItServes(probe, job_id_, placement_.peer_secret(),
                                  std::min(deadline, now + absl::Seconds(2)));
      if (!ServesAnotherRun(other_run)) break;
    }
    if (absl::Now() >= deadline) {
      const std::string waited = absl::StrFormat("%.1fs", absl::ToDoubleSeconds(now - start));
      if (ServesAnotherRun(other_run)) {
        // Unavailable, naming the peer: the job's failure is owed to it (curable by a restart).
        return absl::UnavailableError(absl::StrCat(
            "peer ", plan::DescribeRank(placement_, peer), " still served another run after ",
            waited, " (its worker did not leave its previous job): ", other_run.message()));
      }
      return absl::UnavailableError(absl::StrCat(
          "peer ", plan::DescribeRank(placement_, peer), " did not accept connections within ",
          waited, " (its worker did not start the job, or the address is unreachable from here)"));
    }
    if (state == GRPC_CHANNEL_READY) {
      absl::SleepFor(std::min(deadline - absl::Now(), options_.connect_poll));
    } else {
      probe->WaitForStateChange(
          state, absl::ToChronoTime(std::min(deadline, absl::Now() + options_.connect_poll)));
    }
  }
  probe.reset();
  std::shared_ptr<comm::GrpcTransport> t = transport();
  const int peers[] = {peer};
  absl::Status s = t->Connect(peers, deadline);
  if (!s.ok() && aborted()) return absl::CancelledError("aborted while connecting to the peers");
  return s;
}

absl::Status ParallelJob::Train(
    kernels::Backend* backend, parallel::ParallelTrainingOptions options,
    const std::function<void(int64_t start_step, const std::string& resumed_from)>& on_started,
    const TrainingCallbacks& callbacks) {
  std::shared_ptr<comm::GrpcTransport> t = transport();
  if (t == nullptr) return absl::FailedPreconditionError("Train before Connect");
  observed_ = std::make_unique<comm::ObservedTransport>(t.get(), options_.observer, &recorder_);
  absl::StatusOr<std::unique_ptr<parallel::ParallelTrainer>> trainer =
      parallel::ParallelTrainer::Create(backend, observed_.get(), std::move(options));
  if (!trainer.ok()) return Annotate(trainer.status(), "cannot start training");
  trainer_ = std::move(*trainer);
  if (on_started) on_started(trainer_->start_step(), trainer_->resumed_from());
  absl::Status s = trainer_->Run(callbacks);
  // After an error the trainer stays until the destructor, after the transport is closed: its
  // gradient sync thread may still wait on a peer, and joining it now could take a deadline.
  if (s.ok()) trainer_.reset();
  return s;
}

std::vector<int> ParallelJob::SuspectPeers(const absl::Status& s) const {
  const bool waited_on_peers =
      absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsAborted(s);
  if (!waited_on_peers) return {};
  std::shared_ptr<comm::GrpcTransport> t = transport();
  std::vector<int> suspects;
  for (int r : peers_) {  // the only ranks this one talks to
    const bool failed = t != nullptr && !t->PeerStatus(r).ok();
    // The transport names peers as DescribeRank does: "rank 3 (worker w4 at ...".
    const bool named = absl::StrContains(
        s.message(), absl::StrCat("worker ", placement_.ranks(r).worker_id(), " at "));
    if (failed || named) suspects.push_back(r);
  }
  return suspects;
}

}  // namespace dtrain::worker
