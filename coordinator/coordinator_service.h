// The Coordinator gRPC service (proto/coordinator.proto) on gRPC's callback API.
//
// Unary calls run JobManager's method inline and finish at once: none of them waits on a worker
// or another call (work for workers travels in heartbeat responses), so no gRPC thread blocks.
// SubmitJob and DeleteJob are the exceptions: reading and planning a spec (up to
// --max_spec_bytes), and a deletion's database write, run on two threads of the service's own
// (BoundedExecutor), so heartbeats never wait behind them. DeleteJob then waits a few
// heartbeats for the worker that removes the job's directory holding no thread: that worker's
// heartbeat, or a scheduler pass, answers the call.
// Every request's top-level strings are checked against their caps first (request_bounds.h).
// WatchJob and JobLogs are ServerWriteReactors that write one message at a time, reading what is
// new from the store, and when nothing is new parks on the job's JobNotifier entry instead of a
// thread; it finishes after the job's final state, when the client cancels (or its deadline
// passes), or with UNAVAILABLE at Shutdown().
//
//   CoordinatorService service(manager.get());
//   ASSIGN_OR_RETURN(RunningServer server, StartServer("0.0.0.0:7070", &service));
//   ...
//   service.Shutdown();                              // ends the watches
//   server.server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
#ifndef DTRAIN_COORDINATOR_COORDINATOR_SERVICE_H_
#define DTRAIN_COORDINATOR_COORDINATOR_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/tls.h"
#include "coordinator/bounded_executor.h"
#include "coordinator/diagnose_job.h"
#include "coordinator/job_manager.h"
#include "coordinator/watch_limiter.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"

namespace dtrain::coordinator {

class CoordinatorService final : public Coordinator::CallbackService {
 public:
  // At most `max_watches_per_client` WatchJob and JobLogs streams open at once per client
  // (watch_limiter.h; --max_watches_per_client; 0: no cap); one more is RESOURCE_EXHAUSTED.
  explicit CoordinatorService(JobManager* manager, int max_watches_per_client = 16)
      : manager_(manager), watches_(max_watches_per_client) {}

  // Ends every open WatchJob with UNAVAILABLE and refuses new ones, so a server shutdown does
  // not wait for watchers; finishes the submits already queued and refuses new ones. Call before
  // grpc::Server::Shutdown.
  void Shutdown();

  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* context,
                                           const RegisterWorkerRequest* request,
                                           RegisterWorkerResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const HeartbeatRequest* request,
                                      HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* context,
                                           const ReportProgressRequest* request,
                                           ReportProgressResponse* response) override;
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const SubmitJobRequest* request,
                                      SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const GetJobRequest* request, Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const ListJobsRequest* request,
                                     ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const CancelJobRequest* request, Job* response) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* context,
                                      const DeleteJobRequest* request,
                                      DeleteJobResponse* response) override;
  grpc::ServerUnaryReactor* SampleJob(grpc::CallbackServerContext* context,
                                      const SampleJobRequest* request,
                                      SampleJobResponse* response) override;
  grpc::ServerWriteReactor<JobUpdate>* WatchJob(grpc::CallbackServerContext* context,
                                                const WatchJobRequest* request) override;
  grpc::ServerUnaryReactor* GetJobSteps(grpc::CallbackServerContext* context,
                                        const GetJobStepsRequest* request,
                                        GetJobStepsResponse* response) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const ListWorkersRequest* request,
                                        ListWorkersResponse* response) override;
  grpc::ServerUnaryReactor* DeregisterWorker(grpc::CallbackServerContext* context,
                                             const DeregisterWorkerRequest* request,
                                             DeregisterWorkerResponse* response) override;
  grpc::ServerUnaryReactor* ForgetWorker(grpc::CallbackServerContext* context,
                                         const ForgetWorkerRequest* request,
                                         ForgetWorkerResponse* response) override;
  grpc::ServerUnaryReactor* DrainWorker(grpc::CallbackServerContext* context,
                                        const DrainWorkerRequest* request,
                                        DrainWorkerResponse* response) override;
  grpc::ServerWriteReactor<LogEntry>* JobLogs(grpc::CallbackServerContext* context,
                                              const JobLogsRequest* request) override;
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* context,
                                            const ListCheckpointsRequest* request,
                                            ListCheckpointsResponse* response) override;
  // Answers once every rank of the job answered its flight recorder or missed the 2 s deadline
  // (diagnose_job.h): no gRPC thread waits meanwhile.
  grpc::ServerUnaryReactor* Diagnose(grpc::CallbackServerContext* context,
                                     const DiagnoseJobRequest* request,
                                     JobDiagnosis* response) override;
  // The same gathering, after clock probes, cut to one step (trace_job.h).
  grpc::ServerUnaryReactor* TraceJob(grpc::CallbackServerContext* context,
                                     const TraceJobRequest* request, JobTrace* response) override;
  grpc::ServerUnaryReactor* SetJobPriority(grpc::CallbackServerContext* context,
                                           const SetJobPriorityRequest* request,
                                           Job* response) override;
  grpc::ServerUnaryReactor* CheckpointJob(grpc::CallbackServerContext* context,
                                          const CheckpointJobRequest* request,
                                          Job* response) override;
  grpc::ServerUnaryReactor* RebalanceJob(grpc::CallbackServerContext* context,
                                         const RebalanceJobRequest* request,
                                         RebalanceJobResponse* response) override;
  grpc::ServerUnaryReactor* Access(grpc::CallbackServerContext* context,
                                   const AccessRequest* request, AccessResponse* response) override;

  // The coordinator's credentials towards the workers' peer services, which Diagnose calls
  // (common/tls.h; plaintext by default, as in-process tests run).
  void set_peer_tls(TlsFiles tls) { diagnose_.tls = std::move(tls); }

 private:
  JobManager* const manager_;
  GatherOptions diagnose_;
  WatchLimiter watches_;
  // Runs `work` (given the client's deadline) on submits_; the call is answered (its Job
  // stripped of secrets) when `work`, or what it hands `answer` to, calls it, once.
  template <typename T>
  using Answer = std::function<void(absl::StatusOr<T>)>;
  template <typename T>
  grpc::ServerUnaryReactor* OffThread(
      grpc::CallbackServerContext* context, T* response,
      std::function<void(absl::Time deadline, Answer<T> answer)> work);
  // SubmitJob's parse, plan and checks, DeleteJob's write: 2 threads, at most 64 calls waiting.
  BoundedExecutor submits_{2, 64};
};

struct RunningServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound port (useful with "host:0")
};

// Builds and starts a server for `service` on `listen` ("0.0.0.0:7070", "127.0.0.1:0"), with
// SO_REUSEPORT off so a second coordinator on the same port fails instead of sharing it, and
// the optional `interceptor` on every call (CoordinatorMetrics::NewRpcInterceptorFactory),
// and `credentials` (common/tls.h's ServerCredentials; null: plaintext, for in-process tests).
// Unavailable "cannot listen on ..." when the address is in use or invalid.
absl::StatusOr<RunningServer> StartServer(
    const std::string& listen, grpc::Service* service,
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> interceptor = nullptr,
    std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_COORDINATOR_SERVICE_H_
