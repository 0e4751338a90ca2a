// Who may call what on the Coordinator service: one table, one function. The caller's role is
// its client certificate's subject OU (common/tls.h PeerIdentityOf):
//
//   admin   SubmitJob, CancelJob, DeleteJob, RebalanceJob, SetJobPriority, CheckpointJob on
//           any job, ForgetWorker, DrainWorker, and everything a viewer may call
//   user    SubmitJob; CancelJob, DeleteJob, RebalanceJob, SetJobPriority, CheckpointJob on its
//           own jobs only
//           (Job.owner is the CN of the certificate that submitted it); everything a viewer
//           may call
//   viewer  GetJob, ListJobs, WatchJob, ListWorkers, JobLogs, ListCheckpoints, Diagnose,
//           TraceJob, Access
//   worker  RegisterWorker, Heartbeat, ReportProgress, DeregisterWorker, Access
//
// A coordinator started with --insecure has no authentication at all: every caller has role
// "insecure" and may call everything. Any other role (coordinator, a typo) and any method not in
// the table may call nothing.
//
// Worker ids: a worker certificate issued for one worker (`dtrain certs issue DIR w1
// --role=worker`: CN w1) may act only as worker w1; the shared certificate of `dtrain certs
// init` (CN "worker") may register and act as any worker id.
//
//   RETURN_IF_ERROR(Authorize(who, "CancelJob"));                  // the role, before anything
//   RETURN_IF_ERROR(AuthorizeOnJob(who, "CancelJob", job.id(), job.owner()));  // then the job
//   RETURN_IF_ERROR(AuthorizeWorker(who, "Heartbeat", request.worker_id()));
#ifndef DTRAIN_COORDINATOR_ROLES_H_
#define DTRAIN_COORDINATOR_ROLES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tls.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

// The roles that may call `method` (the RPC's name in proto/coordinator.proto, "CancelJob"),
// on any job for the job-scoped methods; empty for a method not in the table. The table's own
// (static) vector.
const std::vector<std::string>& RolesFor(absl::string_view method);

// OK when `who`'s role may call `method` at all (for a job-scoped method, on some job: then
// AuthorizeOnJob decides which); else PermissionDenied naming the certificate, its role, the
// method and the role it needs: "certificate 'viewer' (role viewer) may not call CancelJob: it
// needs role admin or user".
absl::Status Authorize(const PeerIdentity& who, absl::string_view method);

// Whether `method` acts on one job and role user may call it only on its own (CancelJob,
// DeleteJob, RebalanceJob, SetJobPriority).
bool IsJobScoped(absl::string_view method);

// For a job-scoped method: OK when `who` may call it on job `job_id` submitted by `owner`
// (Job.owner): any job for admin (and insecure), its own for user. Else PermissionDenied:
// "certificate 'bob' (role user) may not call CancelJob on job-000004: it was submitted by
// alice; role user acts only on its own jobs (role admin on any)". OK for other methods.
absl::Status AuthorizeOnJob(const PeerIdentity& who, absl::string_view method,
                            absl::string_view job_id, absl::string_view owner);

// Whether `who` may give a job JobSpec.priority `priority`, at submit (SubmitJob) or after
// (SetJobPriority): any for admin (and insecure); at most `max_user_priority` for the others (a
// user's job of a higher priority than the others' would pass the queue's fair share).
// PermissionDenied: "certificate 'alice' (role user) may not give a job priority 50: role user's
// jobs may have at most 0 (--max_user_priority; role admin any)".
absl::Status AuthorizePriority(const PeerIdentity& who, int priority, int max_user_priority);

// Authorize, and for a worker certificate of one worker (its name is not "worker") also that
// `worker_id` is that worker: PermissionDenied "certificate 'w1' (role worker) may not act as
// worker w2".
absl::Status AuthorizeWorker(const PeerIdentity& who, absl::string_view method,
                             absl::string_view worker_id);

// What `who` may call (Coordinator.Access): every method of the table Authorize allows, in the
// table's order; with `job` (its id and owner), a job-scoped method only when AuthorizeOnJob
// allows it too, else in `refused` with the reason.
AccessResponse AccessOf(const PeerIdentity& who, const Job* job = nullptr);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_ROLES_H_
