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
const std::vector<std::string> kAdminRpcs = {"SubmitJob", "CancelJob", "ForgetWorker",
                                             "DrainWorker"};
const std::vector<std::string> kViewerRpcs = {"GetJob",      "ListJobs", "WatchJob",
                                              "ListWorkers", "JobLogs",  "ListCheckpoints",
                                              "Diagnose",    "TraceJob"};

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
            "certificate 'viewer' (role viewer) may not call CancelJob: it needs role admin");
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
            "certificate 'worker' (role worker) may not call SubmitJob: it needs role admin");
  EXPECT_EQ(Authorize(Who("w1", "worker"), "ListJobs").message(),
            "certificate 'w1' (role worker) may not call ListJobs: it needs role viewer or admin");
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
