#include "coordinator/coordinator_service.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_limits.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "coordinator/client_view.h"
#include "coordinator/job_streams.h"
#include "coordinator/request_bounds.h"
#include "coordinator/roles.h"
#include "coordinator/step_thinning.h"
#include "coordinator/trace_job.h"

namespace dtrain::coordinator {
namespace {

// Finishes a unary call with `result`.
template <typename T>
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, absl::StatusOr<T> result,
                                T* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (result.ok()) *response = *std::move(result);
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

// The caller, when it may call `method` (roles.h); for the worker RPCs also when it may act as
// `worker_id`; first whether the request's strings are within their caps (request_bounds.h),
// before anything quotes them. A refusal of the caller is logged: it is either a misconfigured
// client or an intruder.
absl::StatusOr<PeerIdentity> Caller(JobManager* manager, grpc::CallbackServerContext* context,
                                    absl::string_view method,
                                    const google::protobuf::Message& request,
                                    const std::string* worker_id = nullptr) {
  RETURN_IF_ERROR(CheckRequestBounds(request));
  absl::StatusOr<PeerIdentity> who = PeerIdentityOf(*context);
  absl::Status status = who.status();
  if (who.ok()) {
    status =
        worker_id == nullptr ? Authorize(*who, method) : AuthorizeWorker(*who, method, *worker_id);
  }
  if (!status.ok()) {
    manager->options().log(
        absl::StrCat("refused ", method, " from ", context->peer(), ": ", status.message()));
    return status;
  }
  return who;
}

absl::Status Allowed(JobManager* manager, grpc::CallbackServerContext* context,
                     absl::string_view method, const google::protobuf::Message& request,
                     const std::string* worker_id = nullptr) {
  return Caller(manager, context, method, request, worker_id).status();
}

// Caller, and for a job-scoped method (roles.h IsJobScoped) whether it may act on `job_id`,
// whose owner the store has. An empty or unknown id passes: the method says so itself.
absl::StatusOr<PeerIdentity> CallerOnJob(JobManager* manager, grpc::CallbackServerContext* context,
                                         absl::string_view method,
                                         const google::protobuf::Message& request,
                                         const std::string& job_id) {
  ASSIGN_OR_RETURN(PeerIdentity who, Caller(manager, context, method, request));
  if (job_id.empty() || !IsJobScoped(method)) return who;
  // Fails closed: a call on a job whose owner cannot be read is refused (as NOT_FOUND for "no
  // job job-12"), never let through to a manager that might find the job another way.
  ASSIGN_OR_RETURN(const Job job, manager->store().GetJob(job_id, /*with_history=*/false));
  if (absl::Status s = AuthorizeOnJob(who, method, job_id, job.owner()); !s.ok()) {
    manager->options().log(
        absl::StrCat("refused ", method, " from ", context->peer(), ": ", s.message()));
    return s;
  }
  return who;
}

template <typename T>
absl::StatusOr<T> Stripped(absl::StatusOr<T> result) {
  if (!result.ok()) return result;
  if constexpr (std::is_same_v<T, Job>) {
    StripSecrets(*result);
  } else if constexpr (std::is_same_v<T, ListJobsResponse>) {
    for (Job& job : *result->mutable_jobs()) StripSecrets(job);
  } else if constexpr (std::is_same_v<T, GetJobStepsResponse>) {
    // steps only: no Job in it
  } else {
    StripSecrets(*result->mutable_job());  // SubmitJobResponse
  }
  return result;
}

}  // namespace

void CoordinatorService::Shutdown() {
  manager_->notifier().Shutdown();
  submits_.Stop();
  manager_->EndDeleteWaits();  // a DeleteJob waiting for a worker answers "pending" now
  manager_->EndSampleWaits();  // a SampleJob waiting for a worker answers UNAVAILABLE now
}

grpc::ServerUnaryReactor* CoordinatorService::RegisterWorker(grpc::CallbackServerContext* context,
                                                             const RegisterWorkerRequest* request,
                                                             RegisterWorkerResponse* response) {
  if (absl::Status s =
          Allowed(manager_, context, "RegisterWorker", *request, &request->worker_id());
      !s.ok()) {
    return Reply<RegisterWorkerResponse>(context, s, response);
  }
  return Reply(context, manager_->RegisterWorker(*request), response);
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* context,
                                                        const HeartbeatRequest* request,
                                                        HeartbeatResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "Heartbeat", *request, &request->worker_id());
      !s.ok()) {
    return Reply<HeartbeatResponse>(context, s, response);
  }
  return Reply(context, manager_->Heartbeat(*request), response);
}

grpc::ServerUnaryReactor* CoordinatorService::ReportProgress(grpc::CallbackServerContext* context,
                                                             const ReportProgressRequest* request,
                                                             ReportProgressResponse* response) {
  if (absl::Status s =
          Allowed(manager_, context, "ReportProgress", *request, &request->worker_id());
      !s.ok()) {
    return Reply<ReportProgressResponse>(context, s, response);
  }
  return Reply(context, manager_->ReportProgress(*request), response);
}

template <typename T>
grpc::ServerUnaryReactor* CoordinatorService::OffThread(
    grpc::CallbackServerContext* context, T* response,
    std::function<void(absl::Time deadline, Answer<T> answer)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time deadline = absl::FromChrono(context->deadline());
  Answer<T> answer = [reactor, response](absl::StatusOr<T> result) {
    result = Stripped(std::move(result));
    if (result.ok()) *response = *std::move(result);
    reactor->Finish(ToGrpcStatus(result.status()));
  };
  absl::Status queued = submits_.Schedule(
      [deadline, work = std::move(work), answer = std::move(answer)] { work(deadline, answer); });
  if (!queued.ok()) reactor->Finish(ToGrpcStatus(queued));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(grpc::CallbackServerContext* context,
                                                        const SubmitJobRequest* request,
                                                        SubmitJobResponse* response) {
  absl::StatusOr<PeerIdentity> who = Caller(manager_, context, "SubmitJob", *request);
  if (!who.ok()) return Reply<SubmitJobResponse>(context, who.status(), response);
  // Off gRPC's threads (bounded_executor.h): heartbeats never wait behind a submit. A submit
  // whose client gave up while it waited is not started, and one whose deadline passes while it
  // is checked creates no job (JobManager::SubmitJob).
  return OffThread<SubmitJobResponse>(
      context, response,
      [this, request, who = *who](absl::Time deadline, Answer<SubmitJobResponse> answer) {
        const int max_priority = manager_->options().max_user_priority;
        auto may_submit = [&who, max_priority](const JobSpec& spec) {
          return AuthorizePriority(who, spec.priority(), max_priority);
        };
        answer(absl::Now() >= deadline
                   ? absl::DeadlineExceededError(
                         "the client's deadline passed before the spec was read")
                   : manager_->SubmitJob(*request, deadline, who.name, may_submit));
      });
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* context,
                                                     const GetJobRequest* request, Job* response) {
  if (absl::Status s = Allowed(manager_, context, "GetJob", *request); !s.ok()) {
    return Reply<Job>(context, s, response);
  }
  return Reply(context, Stripped(manager_->GetJob(request->job_id())), response);
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* context,
                                                       const ListJobsRequest* request,
                                                       ListJobsResponse* response) {
  absl::StatusOr<PeerIdentity> who = Caller(manager_, context, "ListJobs", *request);
  if (!who.ok()) return Reply<ListJobsResponse>(context, who.status(), response);
  if (!request->mine()) return Reply(context, Stripped(manager_->ListJobs(*request)), response);
  ListJobsRequest mine = *request;
  mine.set_owner(who->name);
  return Reply(context, Stripped(manager_->ListJobs(mine)), response);
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* context,
                                                        const CancelJobRequest* request,
                                                        Job* response) {
  absl::StatusOr<PeerIdentity> who =
      CallerOnJob(manager_, context, "CancelJob", *request, request->job_id());
  if (!who.ok()) return Reply<Job>(context, who.status(), response);
  return Reply(context,
               Stripped(manager_->CancelJob(request->job_id(), request->reason(), who->name)),
               response);
}

grpc::ServerUnaryReactor* CoordinatorService::DeleteJob(grpc::CallbackServerContext* context,
                                                        const DeleteJobRequest* request,
                                                        DeleteJobResponse* response) {
  if (absl::Status s =
          CallerOnJob(manager_, context, "DeleteJob", *request, request->job_id()).status();
      !s.ok()) {
    return Reply<DeleteJobResponse>(context, s, response);
  }
  // Off gRPC's threads, as a submit (the database's write); the worker's answer is then waited
  // for without a thread: the heartbeat that brings it, or a scheduler pass, answers the call.
  return OffThread<DeleteJobResponse>(
      context, response, [this, request](absl::Time deadline, Answer<DeleteJobResponse> answer) {
        manager_->DeleteJob(*request, deadline, std::move(answer));
      });
}

grpc::ServerUnaryReactor* CoordinatorService::SampleJob(grpc::CallbackServerContext* context,
                                                        const SampleJobRequest* request,
                                                        SampleJobResponse* response) {
  if (absl::Status s =
          CallerOnJob(manager_, context, "SampleJob", *request, request->job_id()).status();
      !s.ok()) {
    return Reply<SampleJobResponse>(context, s, response);
  }
  // The worker's answer is waited for without a thread: the heartbeat that brings it, or a
  // scheduler pass (the deadline, a lost worker), answers the call.
  auto* reactor = context->DefaultReactor();
  manager_->SampleJob(*request, absl::FromChrono(context->deadline()),
                      [reactor, response](absl::StatusOr<SampleJobResponse> answer) {
                        if (answer.ok()) *response = *std::move(answer);
                        reactor->Finish(ToGrpcStatus(answer.status()));
                      });
  return reactor;
}

grpc::ServerWriteReactor<JobUpdate>* CoordinatorService::WatchJob(
    grpc::CallbackServerContext* context, const WatchJobRequest* request) {
  return StartWatchJob(manager_, &watches_, context, *request,
                       Allowed(manager_, context, "WatchJob", *request));
}

grpc::ServerWriteReactor<LogEntry>* CoordinatorService::JobLogs(
    grpc::CallbackServerContext* context, const JobLogsRequest* request) {
  return StartJobLogs(manager_, &watches_, context, *request,
                      Allowed(manager_, context, "JobLogs", *request));
}

grpc::ServerUnaryReactor* CoordinatorService::DeregisterWorker(
    grpc::CallbackServerContext* context, const DeregisterWorkerRequest* request,
    DeregisterWorkerResponse* response) {
  if (absl::Status s =
          Allowed(manager_, context, "DeregisterWorker", *request, &request->worker_id());
      !s.ok()) {
    return Reply<DeregisterWorkerResponse>(context, s, response);
  }
  absl::Status status = manager_->DeregisterWorker(*request);
  if (!status.ok()) return Reply<DeregisterWorkerResponse>(context, status, response);
  return Reply(context, absl::StatusOr<DeregisterWorkerResponse>(DeregisterWorkerResponse()),
               response);
}

grpc::ServerUnaryReactor* CoordinatorService::ForgetWorker(grpc::CallbackServerContext* context,
                                                           const ForgetWorkerRequest* request,
                                                           ForgetWorkerResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "ForgetWorker", *request); !s.ok()) {
    return Reply<ForgetWorkerResponse>(context, s, response);
  }
  return Reply(context, manager_->ForgetWorker(request->worker_id()), response);
}

grpc::ServerUnaryReactor* CoordinatorService::DrainWorker(grpc::CallbackServerContext* context,
                                                          const DrainWorkerRequest* request,
                                                          DrainWorkerResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "DrainWorker", *request); !s.ok()) {
    return Reply<DrainWorkerResponse>(context, s, response);
  }
  return Reply(context, manager_->DrainWorker(*request), response);
}

grpc::ServerUnaryReactor* CoordinatorService::ListCheckpoints(grpc::CallbackServerContext* context,
                                                              const ListCheckpointsRequest* request,
                                                              ListCheckpointsResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "ListCheckpoints", *request); !s.ok()) {
    return Reply<ListCheckpointsResponse>(context, s, response);
  }
  return Reply(context, manager_->ListCheckpoints(request->job_id()), response);
}

grpc::ServerUnaryReactor* CoordinatorService::GetJobSteps(grpc::CallbackServerContext* context,
                                                          const GetJobStepsRequest* request,
                                                          GetJobStepsResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "GetJobSteps", *request); !s.ok()) {
    return Reply<GetJobStepsResponse>(context, s, response);
  }
  // Off gRPC's threads: a month-long job's range is read in batches of thousands of steps.
  return OffThread<GetJobStepsResponse>(
      context, response, [this, request](absl::Time deadline, Answer<GetJobStepsResponse> answer) {
        answer(absl::Now() >= deadline
                   ? absl::DeadlineExceededError(
                         "the client's deadline passed before its steps were read")
                   : ReadJobSteps(manager_->store(), *request));
      });
}

grpc::ServerUnaryReactor* CoordinatorService::ListWorkers(grpc::CallbackServerContext* context,
                                                          const ListWorkersRequest* request,
                                                          ListWorkersResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "ListWorkers", *request); !s.ok()) {
    return Reply<ListWorkersResponse>(context, s, response);
  }
  return Reply(context, absl::StatusOr<ListWorkersResponse>(manager_->ListWorkers()), response);
}

grpc::ServerUnaryReactor* CoordinatorService::Diagnose(grpc::CallbackServerContext* context,
                                                       const DiagnoseJobRequest* request,
                                                       JobDiagnosis* response) {
  if (absl::Status s = Allowed(manager_, context, "Diagnose", *request); !s.ok()) {
    return Reply<JobDiagnosis>(context, s, response);
  }
  absl::StatusOr<Job> job = manager_->GetJob(request->job_id());
  if (!job.ok()) return Reply<JobDiagnosis>(context, job.status(), response);
  const ListWorkersResponse workers = manager_->ListWorkers();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status started =
      StartDiagnosis(*job, workers.workers(), diagnose_, [reactor, response](JobDiagnosis d) {
        *response = std::move(d);
        reactor->Finish(grpc::Status::OK);
      });
  if (!started.ok()) reactor->Finish(ToGrpcStatus(started));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::TraceJob(grpc::CallbackServerContext* context,
                                                       const TraceJobRequest* request,
                                                       JobTrace* response) {
  if (absl::Status s = Allowed(manager_, context, "TraceJob", *request); !s.ok()) {
    return Reply<JobTrace>(context, s, response);
  }
  absl::StatusOr<Job> job = manager_->GetJob(request->job_id());
  if (!job.ok()) return Reply<JobTrace>(context, job.status(), response);
  const ListWorkersResponse workers = manager_->ListWorkers();
  std::optional<int64_t> step;
  if (request->has_step()) step = request->step();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status started = StartTrace(*job, workers.workers(), diagnose_, step,
                                    [reactor, response](absl::StatusOr<JobTrace> trace) {
                                      if (trace.ok()) *response = std::move(*trace);
                                      reactor->Finish(ToGrpcStatus(trace.status()));
                                    });
  if (!started.ok()) reactor->Finish(ToGrpcStatus(started));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::SetJobPriority(grpc::CallbackServerContext* context,
                                                             const SetJobPriorityRequest* request,
                                                             Job* response) {
  absl::StatusOr<PeerIdentity> who =
      CallerOnJob(manager_, context, "SetJobPriority", *request, request->job_id());
  if (!who.ok()) return Reply<Job>(context, who.status(), response);
  // The cap a submit has (roles.h AuthorizePriority), or a user's job could pass it after.
  if (absl::Status s =
          AuthorizePriority(*who, request->priority(), manager_->options().max_user_priority);
      !s.ok()) {
    return Reply<Job>(context, s, response);
  }
  return Reply(
      context,
      Stripped(manager_->SetJobPriority(request->job_id(), request->priority(), who->name)),
      response);
}

grpc::ServerUnaryReactor* CoordinatorService::CheckpointJob(grpc::CallbackServerContext* context,
                                                            const CheckpointJobRequest* request,
                                                            Job* response) {
  absl::StatusOr<PeerIdentity> who =
      CallerOnJob(manager_, context, "CheckpointJob", *request, request->job_id());
  if (!who.ok()) return Reply<Job>(context, who.status(), response);
  return Reply(context, Stripped(manager_->CheckpointJob(request->job_id(), who->name)), response);
}

grpc::ServerUnaryReactor* CoordinatorService::RebalanceJob(grpc::CallbackServerContext* context,
                                                           const RebalanceJobRequest* request,
                                                           RebalanceJobResponse* response) {
  if (absl::Status s =
          CallerOnJob(manager_, context, "RebalanceJob", *request, request->job_id()).status();
      !s.ok()) {
    return Reply<RebalanceJobResponse>(context, s, response);
  }
  if (request->job_id().empty()) {
    return Reply<RebalanceJobResponse>(context, absl::InvalidArgumentError("job_id is empty"),
                                       response);
  }
  absl::StatusOr<RebalanceDecision> d =
      manager_->RebalanceJob(request->job_id(), {}, "dtrain rebalance");
  if (!d.ok()) return Reply<RebalanceJobResponse>(context, d.status(), response);
  RebalanceJobResponse out;
  out.set_moved(d->move);
  for (int n : d->from) out.add_from(n);
  for (int n : d->to) out.add_to(n);
  for (double t : d->stage_compute_s) out.add_stage_compute_s(t);
  out.set_summary(d->summary);
  return Reply(context, absl::StatusOr<RebalanceJobResponse>(std::move(out)), response);
}

grpc::ServerUnaryReactor* CoordinatorService::Access(grpc::CallbackServerContext* context,
                                                     const AccessRequest* request,
                                                     AccessResponse* response) {
  absl::StatusOr<PeerIdentity> who = Caller(manager_, context, "Access", *request);
  if (!who.ok()) return Reply<AccessResponse>(context, who.status(), response);
  if (request->job_id().empty()) {
    return Reply(context, absl::StatusOr<AccessResponse>(AccessOf(*who)), response);
  }
  absl::StatusOr<Job> job = manager_->store().GetJob(request->job_id(), /*with_history=*/false);
  if (!job.ok()) return Reply<AccessResponse>(context, job.status(), response);
  return Reply(context, absl::StatusOr<AccessResponse>(AccessOf(*who, &*job)), response);
}

absl::StatusOr<RunningServer> StartServer(
    const std::string& listen, grpc::Service* service,
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> interceptor,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::ServerBuilder builder;
  if (interceptor != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::move(interceptor));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  RunningServer running;
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  builder.AddListeningPort(listen, credentials, &running.port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxCoordinatorMessageBytes);
  // Ping idle connections so a watcher whose host vanished is noticed (its call is cancelled);
  // let clients ping every 10s without being told off.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.RegisterService(service);
  running.server = builder.BuildAndStart();
  if (running.server == nullptr || running.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (address in use or not valid)"));
  }
  return running;
}

}  // namespace dtrain::coordinator
