#include "coordinator/roles.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrain::coordinator {
namespace {

// The name of the certificate that `dtrain certs init` makes for every worker.
constexpr char kSharedWorkerName[] = "worker";

struct Rule {
  const char* method;
  std::vector<std::string> roles;
};

const std::vector<Rule>& Table() {
  static const auto* table = new std::vector<Rule>{
      // Workers.
      {"RegisterWorker", {kRoleWorker}},
      {"Heartbeat", {kRoleWorker}},
      {"ReportProgress", {kRoleWorker}},
      {"DeregisterWorker", {kRoleWorker}},
      // Users who change things.
      {"SubmitJob", {kRoleAdmin}},
      {"CancelJob", {kRoleAdmin}},
      {"DeleteJob", {kRoleAdmin}},
      {"ForgetWorker", {kRoleAdmin}},
      {"DrainWorker", {kRoleAdmin}},
      {"RebalanceJob", {kRoleAdmin}},
      // Users who look.
      {"GetJob", {kRoleViewer, kRoleAdmin}},
      {"ListJobs", {kRoleViewer, kRoleAdmin}},
      {"WatchJob", {kRoleViewer, kRoleAdmin}},
      {"ListWorkers", {kRoleViewer, kRoleAdmin}},
      {"JobLogs", {kRoleViewer, kRoleAdmin}},
      {"ListCheckpoints", {kRoleViewer, kRoleAdmin}},
      {"Diagnose", {kRoleViewer, kRoleAdmin}},
      {"TraceJob", {kRoleViewer, kRoleAdmin}},
  };
  return *table;
}

std::string Certificate(const PeerIdentity& who) {
  return absl::StrCat("certificate '", who.name, "' (role ", who.role, ")");
}

}  // namespace

const std::vector<std::string>& RolesFor(absl::string_view method) {
  static const auto* none = new std::vector<std::string>();
  for (const Rule& rule : Table()) {
    if (rule.method == method) return rule.roles;
  }
  return *none;
}

absl::Status Authorize(const PeerIdentity& who, absl::string_view method) {
  if (who.role == kRoleInsecure) return absl::OkStatus();    // --insecure: no authentication
  const std::vector<std::string>& roles = RolesFor(method);  // every RPC: no copy
  for (const std::string& role : roles) {
    if (who.role == role) return absl::OkStatus();
  }
  if (roles.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat(Certificate(who), " may not call ", method, ": no role may"));
  }
  return absl::PermissionDeniedError(absl::StrCat(Certificate(who), " may not call ", method,
                                                  ": it needs role ",
                                                  absl::StrJoin(roles, " or ")));
}

absl::Status AuthorizeWorker(const PeerIdentity& who, absl::string_view method,
                             absl::string_view worker_id) {
  if (absl::Status s = Authorize(who, method); !s.ok()) return s;
  if (who.role != kRoleWorker || who.name == kSharedWorkerName || who.name == worker_id) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat(Certificate(who), " may not act as worker ", worker_id, " (", method, ")"));
}

}  // namespace dtrain::coordinator
