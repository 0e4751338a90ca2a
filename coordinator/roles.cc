#include "coordinator/roles.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dtrain::coordinator {
namespace {

// The name of the certificate that `dtrain certs init` makes for every worker.
constexpr char kSharedWorkerName[] = "worker";

struct Rule {
  const char* method;
  std::vector<std::string> roles;  // may call it (a job-scoped one on any job)
  // May call it only on the jobs they submitted (Job.owner is their certificate's name).
  std::vector<std::string> own_jobs_roles = {};
};

const std::vector<Rule>& Table() {
  static const auto* table = new std::vector<Rule>{
      // Workers.
      {"RegisterWorker", {kRoleWorker}},
      {"Heartbeat", {kRoleWorker}},
      {"ReportProgress", {kRoleWorker}},
      {"DeregisterWorker", {kRoleWorker}},
      // People who change things: admins on everything, users on their own jobs.
      {"SubmitJob", {kRoleAdmin, kRoleUser}},
      {"CancelJob", {kRoleAdmin}, {kRoleUser}},
      {"DeleteJob", {kRoleAdmin}, {kRoleUser}},
      {"RebalanceJob", {kRoleAdmin}, {kRoleUser}},
      {"SetJobPriority", {kRoleAdmin}, {kRoleUser}},
      {"CheckpointJob", {kRoleAdmin}, {kRoleUser}},
      {"ForgetWorker", {kRoleAdmin}},
      {"DrainWorker", {kRoleAdmin}},
      // People who look.
      {"GetJob", {kRoleViewer, kRoleAdmin, kRoleUser}},
      {"ListJobs", {kRoleViewer, kRoleAdmin, kRoleUser}},
      {"WatchJob", {kRoleViewer, kRoleAdmin, kRoleUser}},
      {"GetJobSteps", {kRoleViewer, kRoleAdmin, kRoleUser}},
      {"ListWorkers", {kRoleViewer, kRoleAdmin, kRoleUser}},
      {"JobLogs", {kRoleViewer, kRoleAdmin, kRoleUser}},
      {"ListCheckpoints", {kRoleViewer, kRoleAdmin, kRoleUser}},
      {"Diagnose", {kRoleViewer, kRoleAdmin, kRoleUser}},
      {"TraceJob", {kRoleViewer, kRoleAdmin, kRoleUser}},
      // Reads the model as Diagnose reads the ranks: a worker's CPU for a while, two at a time
      // per worker at most (sample_asks.h).
      {"SampleJob", {kRoleViewer, kRoleAdmin, kRoleUser}},
      {"Access", {kRoleViewer, kRoleAdmin, kRoleUser, kRoleWorker}},
  };
  return *table;
}

const Rule* RuleFor(absl::string_view method) {
  for (const Rule& rule : Table()) {
    if (rule.method == method) return &rule;
  }
  return nullptr;
}

bool Has(const std::vector<std::string>& roles, absl::string_view role) {
  for (const std::string& r : roles) {
    if (r == role) return true;
  }
  return false;
}

std::string Certificate(const PeerIdentity& who) {
  return absl::StrCat("certificate '", who.name, "' (role ", who.role, ")");
}

}  // namespace

const std::vector<std::string>& RolesFor(absl::string_view method) {
  static const auto* none = new std::vector<std::string>();
  const Rule* rule = RuleFor(method);
  return rule == nullptr ? *none : rule->roles;
}

bool IsJobScoped(absl::string_view method) {
  const Rule* rule = RuleFor(method);
  return rule != nullptr && !rule->own_jobs_roles.empty();
}

absl::Status Authorize(const PeerIdentity& who, absl::string_view method) {
  if (who.role == kRoleInsecure) return absl::OkStatus();  // --insecure: no authentication
  const Rule* rule = RuleFor(method);                      // every RPC: no copy
  if (rule == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(Certificate(who), " may not call ", method, ": no role may"));
  }
  if (Has(rule->roles, who.role) || Has(rule->own_jobs_roles, who.role)) return absl::OkStatus();
  std::vector<std::string> needed = rule->roles;
  needed.insert(needed.end(), rule->own_jobs_roles.begin(), rule->own_jobs_roles.end());
  return absl::PermissionDeniedError(absl::StrCat(Certificate(who), " may not call ", method,
                                                  ": it needs role ",
                                                  absl::StrJoin(needed, " or ")));
}

absl::Status AuthorizeOnJob(const PeerIdentity& who, absl::string_view method,
                            absl::string_view job_id, absl::string_view owner) {
  RETURN_IF_ERROR(Authorize(who, method));
  const Rule* rule = RuleFor(method);
  if (who.role == kRoleInsecure || rule->own_jobs_roles.empty() || Has(rule->roles, who.role)) {
    return absl::OkStatus();
  }
  if (!owner.empty() && owner == who.name) return absl::OkStatus();
  const std::string whose = owner.empty()
                                ? std::string(
                                      "it has no owner (submitted to an --insecure coordinator or "
                                      "before owners were recorded)")
                                : absl::StrCat("it was submitted by ", owner);
  return absl::PermissionDeniedError(absl::StrCat(
      Certificate(who), " may not call ", method, " on ", job_id, ": ", whose, "; role ", who.role,
      " acts only on its own jobs (role ", absl::StrJoin(rule->roles, " or "), " on any)"));
}

absl::Status AuthorizePriority(const PeerIdentity& who, int priority, int max_user_priority) {
  if (who.role == kRoleInsecure || who.role == kRoleAdmin || priority <= max_user_priority) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      Certificate(who), " may not give a job priority ", priority, ": role ", who.role,
      "'s jobs may have at most ", max_user_priority, " (--max_user_priority; role admin any)"));
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

AccessResponse AccessOf(const PeerIdentity& who, const Job* job) {
  AccessResponse access;
  access.set_name(who.name);
  access.set_role(who.role);
  for (const Rule& rule : Table()) {
    if (!Authorize(who, rule.method).ok()) continue;
    if (job != nullptr && !rule.own_jobs_roles.empty()) {
      absl::Status on_job = AuthorizeOnJob(who, rule.method, job->id(), job->owner());
      if (!on_job.ok()) {
        (*access.mutable_refused())[rule.method] = std::string(on_job.message());
        continue;
      }
    }
    access.add_methods(rule.method);
  }
  return access;
}

}  // namespace dtrain::coordinator
