// The roles table (roles.h), method by method and role by role.
#include "coordinator/roles.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAre;

const std::vector<std::string> kWorkerRpcs = {"RegisterWorker", "Heartbeat", "ReportProgress",
                                              "DeregisterWorker"};
const std::vector<std::string> kAdminRpcs = {"SubmitJob",   "CancelJob",      "ForgetWorker",
                                             "DrainWorker", "SetJobPriority", "CheckpointJob"};
const std::vector<std::string> kViewerRpcs = {
    "GetJob",  "ListJobs",        "WatchJob", "GetJobSteps", "ListWorkers",
    "JobLogs", "ListCheckpoints", "Diagnose", "TraceJob",    "SampleJob"};

PeerIdentity Who(const std::string& name, const std::string& role) { return {name, role}; }

TEST(Roles, AdminMaySubmitCancelForgetAndLookButNotActAsAWorker) {
  for (const auto& m : kAdminRpcs) EXPECT_TRUE(Authorize(Who("admin", "admin"), m).ok()) << m;
  for (const auto& m : kViewerRpcs) EXPECT_TRUE(Authorize(Who("admin", "admin"), m).ok()) << m;
  for (const auto& m : kWorkerRpcs) {
    EXPECT_EQ(Authorize(Who("admin", "admin"), m).code(), absl::StatusCode::kPermissionDenied);
  }
}

TEST(Roles, ViewerMayOnlyLook) {
  for (const auto& m : kViewerRpcs) EXPECT_TRUE(Authorize(Who("viewer", "viewer"), m).ok()) << m;
  for (const auto& m : kAdminRpcs) {
    EXPECT_EQ(Authorize(Who("viewer", "viewer"), m).code(), absl::StatusCode::kPermissionDenied);
  }
  for (const auto& m : kWorkerRpcs) {
    EXPECT_EQ(Authorize(Who("viewer", "viewer"), m).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(Authorize(Who("viewer", "viewer"), "CancelJob").message(),
            "certificate 'viewer' (role viewer) may not call CancelJob: it needs role admin or "
            "user");
}

TEST(Roles, WorkerMayOnlyDoWorkerThings) {
  for (const auto& m : kWorkerRpcs) EXPECT_TRUE(Authorize(Who("worker", "worker"), m).ok()) << m;
  for (const auto& m : kAdminRpcs) {
    EXPECT_EQ(Authorize(Who("worker", "worker"), m).code(), absl::StatusCode::kPermissionDenied);
  }
  for (const auto& m : kViewerRpcs) {
    EXPECT_EQ(Authorize(Who("worker", "worker"), m).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(Authorize(Who("worker", "worker"), "SubmitJob").message(),
            "certificate 'worker' (role worker) may not call SubmitJob: it needs role admin or "
            "user");
  EXPECT_EQ(Authorize(Who("w1", "worker"), "ListJobs").message(),
            "certificate 'w1' (role worker) may not call ListJobs: it needs role viewer or admin "
            "or user");
}

TEST(Roles, AClientCertificateCannotRegisterAWorker) {
  EXPECT_EQ(Authorize(Who("alice", "admin"), "RegisterWorker").message(),
            "certificate 'alice' (role admin) may not call RegisterWorker: it needs role worker");
}

TEST(Roles, InsecureMayCallEverything) {
  for (const auto* list : {&kWorkerRpcs, &kAdminRpcs, &kViewerRpcs}) {
    for (const auto& m : *list) EXPECT_TRUE(Authorize(Who("", kRoleInsecure), m).ok()) << m;
  }
}

TEST(Roles, OtherRolesAndUnknownMethodsMayCallNothing) {
  for (const auto* list : {&kWorkerRpcs, &kAdminRpcs, &kViewerRpcs}) {
    for (const auto& m : *list) {
      EXPECT_EQ(Authorize(Who("coordinator", "coordinator"), m).code(),
                absl::StatusCode::kPermissionDenied);
      EXPECT_EQ(Authorize(Who("x", "Admin"), m).code(), absl::StatusCode::kPermissionDenied);
    }
  }
  EXPECT_THAT(RolesFor("Reboot"), ElementsAre());
  EXPECT_EQ(Authorize(Who("admin", "admin"), "Reboot").message(),
            "certificate 'admin' (role admin) may not call Reboot: no role may");
}

TEST(Roles, AUserSubmitsLooksAndChangesOnlyItsOwnJobs) {
  const PeerIdentity alice = Who("alice", "user");
  EXPECT_TRUE(Authorize(alice, "SubmitJob").ok());
  for (const auto& m : kViewerRpcs) EXPECT_TRUE(Authorize(alice, m).ok()) << m;
  for (const auto& m : kWorkerRpcs) {
    EXPECT_EQ(Authorize(alice, m).code(), absl::StatusCode::kPermissionDenied) << m;
  }
  for (const char* m : {"ForgetWorker", "DrainWorker"}) {
    EXPECT_EQ(Authorize(alice, m).code(), absl::StatusCode::kPermissionDenied) << m;
  }
  for (const char* m :
       {"CancelJob", "DeleteJob", "RebalanceJob", "SetJobPriority", "CheckpointJob"}) {
    EXPECT_TRUE(IsJobScoped(m)) << m;
    EXPECT_TRUE(Authorize(alice, m).ok()) << m;  // on some job: AuthorizeOnJob says which
    EXPECT_TRUE(AuthorizeOnJob(alice, m, "job-000001", "alice").ok()) << m;
    EXPECT_EQ(AuthorizeOnJob(alice, m, "job-000002", "bob").code(),
              absl::StatusCode::kPermissionDenied)
        << m;
    EXPECT_EQ(AuthorizeOnJob(alice, m, "job-000003", "").code(),
              absl::StatusCode::kPermissionDenied)
        << m;
    // An admin on anyone's, and an insecure caller on every job.
    EXPECT_TRUE(AuthorizeOnJob(Who("admin", "admin"), m, "job-000002", "bob").ok()) << m;
    EXPECT_TRUE(AuthorizeOnJob(Who("", kRoleInsecure), m, "job-000002", "bob").ok()) << m;
    EXPECT_EQ(AuthorizeOnJob(Who("viewer", "viewer"), m, "job-000001", "viewer").code(),
              absl::StatusCode::kPermissionDenied)
        << m;
  }
  EXPECT_EQ(AuthorizeOnJob(alice, "CancelJob", "job-000002", "bob").message(),
            "certificate 'alice' (role user) may not call CancelJob on job-000002: it was "
            "submitted by bob; role user acts only on its own jobs (role admin on any)");
  EXPECT_EQ(AuthorizeOnJob(alice, "DeleteJob", "job-000003", "").message(),
            "certificate 'alice' (role user) may not call DeleteJob on job-000003: it has no "
            "owner (submitted to an --insecure coordinator or before owners were recorded); "
            "role user acts only on its own jobs (role admin on any)");
  EXPECT_FALSE(IsJobScoped("SubmitJob"));
  EXPECT_TRUE(AuthorizeOnJob(alice, "GetJob", "job-000002", "bob").ok());
}

TEST(Roles, OnlyAnAdminSubmitsAboveTheUsersHighestPriority) {
  EXPECT_TRUE(AuthorizePriority(Who("alice", "user"), 0, 0).ok());
  EXPECT_TRUE(AuthorizePriority(Who("alice", "user"), -5, 0).ok());
  EXPECT_TRUE(AuthorizePriority(Who("alice", "user"), 10, 10).ok());
  const absl::Status above = AuthorizePriority(Who("alice", "user"), 50, 0);
  EXPECT_EQ(above.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(above.message(),
            "certificate 'alice' (role user) may not give a job priority 50: role user's "
            "jobs may have at most 0 (--max_user_priority; role admin any)");
  EXPECT_TRUE(AuthorizePriority(Who("ops", "admin"), 100, 0).ok());
  EXPECT_TRUE(AuthorizePriority(Who("", kRoleInsecure), 100, 0).ok());
}

TEST(Roles, AccessListsWhatTheTableAllowsOnAJob) {
  Job bobs;
  bobs.set_id("job-000002");
  bobs.set_owner("bob");
  const AccessResponse alice = AccessOf(Who("alice", "user"), &bobs);
  EXPECT_EQ(alice.name(), "alice");
  EXPECT_EQ(alice.role(), "user");
  EXPECT_THAT(
      alice.methods(),
      ElementsAre("SubmitJob", "GetJob", "ListJobs", "WatchJob", "GetJobSteps", "ListWorkers",
                  "JobLogs", "ListCheckpoints", "Diagnose", "TraceJob", "SampleJob", "Access"));
  // CancelJob, DeleteJob, RebalanceJob, SetJobPriority, CheckpointJob
  EXPECT_EQ(alice.refused().size(), 5u);
  EXPECT_THAT(alice.refused().at("CancelJob"), ::testing::HasSubstr("submitted by bob"));
  const AccessResponse bob = AccessOf(Who("bob", "user"), &bobs);
  EXPECT_THAT(bob.methods(), ::testing::Contains("CancelJob"));
  EXPECT_TRUE(bob.refused().empty());
  // Without a job: what the role may call at all.
  EXPECT_THAT(AccessOf(Who("alice", "user")).methods(), ::testing::Contains("DeleteJob"));
  const AccessResponse viewer = AccessOf(Who("viewer", "viewer"), &bobs);
  EXPECT_THAT(viewer.methods(), ::testing::Not(::testing::Contains("CancelJob")));
  EXPECT_TRUE(viewer.refused().empty());  // not its role's at all: not "refused on this job"
  EXPECT_THAT(
      AccessOf(Who("w1", "worker")).methods(),
      ElementsAre("RegisterWorker", "Heartbeat", "ReportProgress", "DeregisterWorker", "Access"));
}

TEST(Roles, APerWorkerCertificateActsOnlyAsItsWorker) {
  EXPECT_TRUE(AuthorizeWorker(Who("w1", "worker"), "Heartbeat", "w1").ok());
  const absl::Status s = AuthorizeWorker(Who("w1", "worker"), "Heartbeat", "w2");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "certificate 'w1' (role worker) may not act as worker w2 (Heartbeat)");
  // The shared certificate of `dtrain certs init` may be any worker.
  EXPECT_TRUE(AuthorizeWorker(Who("worker", "worker"), "RegisterWorker", "w7").ok());
  EXPECT_TRUE(AuthorizeWorker(Who("", kRoleInsecure), "RegisterWorker", "w7").ok());
  EXPECT_EQ(AuthorizeWorker(Who("w1", "viewer"), "RegisterWorker", "w1").code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace dtrain::coordinator
