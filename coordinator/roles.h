// Who may call what on the Coordinator service: one table, one function. The caller's role is
// its client certificate's subject OU (common/tls.h PeerIdentityOf):
//
//   admin   SubmitJob, CancelJob, DeleteJob, ForgetWorker, DrainWorker, RebalanceJob, and
//           everything a viewer may call
//   viewer  GetJob, ListJobs, WatchJob, ListWorkers, JobLogs, ListCheckpoints, Diagnose
//   worker  RegisterWorker, Heartbeat, ReportProgress, DeregisterWorker (nothing else)
//
// A coordinator started with --insecure has no authentication at all: every caller has role
// "insecure" and may call everything. Any other role (coordinator, a typo) and any method not in
// the table may call nothing.
//
// Worker ids: a worker certificate issued for one worker (`dtrain certs issue DIR w1
// --role=worker`: CN w1) may act only as worker w1; the shared certificate of `dtrain certs
// init` (CN "worker") may register and act as any worker id.
//
//   RETURN_IF_ERROR(Authorize(who, "CancelJob"));
//   RETURN_IF_ERROR(AuthorizeWorker(who, "Heartbeat", request.worker_id()));
#ifndef DTRAIN_COORDINATOR_ROLES_H_
#define DTRAIN_COORDINATOR_ROLES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tls.h"

namespace dtrain::coordinator {

// The roles that may call `method` (the RPC's name in proto/coordinator.proto, "CancelJob");
// empty for a method not in the table. The table's own (static) vector.
const std::vector<std::string>& RolesFor(absl::string_view method);

// OK when `who` may call `method`; else PermissionDenied naming the certificate, its role, the
// method and the role it needs: "certificate 'viewer' (role viewer) may not call CancelJob: it
// needs role admin".
absl::Status Authorize(const PeerIdentity& who, absl::string_view method);

// Authorize, and for a worker certificate of one worker (its name is not "worker") also that
// `worker_id` is that worker: PermissionDenied "certificate 'w1' (role worker) may not act as
// worker w2".
absl::Status AuthorizeWorker(const PeerIdentity& who, absl::string_view method,
                             absl::string_view worker_id);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_ROLES_H_
