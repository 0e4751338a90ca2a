// client/certs: what `dtrain certs init` and `issue` write, checked by the `openssl` command
// (an independent oracle): the chain verifies, subjects carry name and role, SANs and key
// permissions are right, an expired certificate is expired, a CA is never replaced.
#include "client/certs.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/tls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TempDir() {
  std::string dir = absl::StrCat(::testing::TempDir(), "/certs_test_", getpid(), "_",
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
  EXPECT_EQ(std::system(absl::StrCat("rm -rf ", dir).c_str()), 0);
  return dir;
}

// The command's stdout and stderr; `status` its exit status.
std::string Shell(const std::string& command, int* status = nullptr) {
  std::string output;
  FILE* pipe = popen(absl::StrCat(command, " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  int rc = pclose(pipe);
  if (status != nullptr) *status = rc;
  return output;
}

std::string Text(const std::string& pem) {
  return Shell(absl::StrCat("openssl x509 -noout -text -nameopt RFC2253 -in ", pem));
}

int Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(Certs, InitWritesACaAndOneCertificatePerRoleThatVerify) {
  const std::string dir = TempDir();
  CertOptions options;
  options.hosts = {"10.0.0.5", "coord.example.org"};
  absl::StatusOr<std::vector<std::string>> written = InitCertificates(dir, options);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->size(), 10u);
  EXPECT_EQ(Mode(dir + "/ca.key"), 0600);
  for (const std::string role : {"coordinator", "worker", "admin", "viewer"}) {
    const std::string pem = absl::StrCat(dir, "/", role, ".pem");
    EXPECT_EQ(Mode(absl::StrCat(dir, "/", role, ".key")), 0600);
    EXPECT_EQ(Mode(pem), 0644);
    int status = -1;
    EXPECT_THAT(Shell(absl::StrCat("openssl verify -CAfile ", dir, "/ca.pem ", pem), &status),
                HasSubstr(": OK"));
    EXPECT_EQ(status, 0);
    EXPECT_THAT(Text(pem),
                HasSubstr(absl::StrCat("Subject: CN=", role, ",OU=", role, ",O=dtrain")));
    TlsFiles files{dir + "/ca.pem", pem, absl::StrCat(dir, "/", role, ".key")};
    EXPECT_TRUE(ValidateTlsFiles(files, "test").ok());
  }
  const std::string coordinator = Text(dir + "/coordinator.pem");
  EXPECT_THAT(coordinator, HasSubstr("DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:"
                                     "0:0:1, DNS:coordinator, DNS:dtrain-coordinator, IP "
                                     "Address:10.0.0.5, DNS:coord.example.org"));
  EXPECT_THAT(coordinator, HasSubstr("TLS Web Server Authentication, TLS Web Client"));
  const std::string worker = Text(dir + "/worker.pem");
  EXPECT_THAT(worker, HasSubstr("DNS:dtrain-worker, IP Address:10.0.0.5"));
  const std::string admin = Text(dir + "/admin.pem");
  EXPECT_THAT(admin, Not(HasSubstr("Subject Alternative Name")));
  EXPECT_THAT(admin, Not(HasSubstr("Server Authentication")));
  EXPECT_THAT(Text(dir + "/ca.pem"), HasSubstr("CA:TRUE"));
}

TEST(Certs, InitNeverReplacesACa) {
  const std::string dir = TempDir();
  ASSERT_TRUE(InitCertificates(dir, CertOptions()).ok());
  const std::string before = Shell(absl::StrCat("cat ", dir, "/ca.pem"));
  absl::StatusOr<std::vector<std::string>> again = InitCertificates(dir, CertOptions());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(), HasSubstr("not replacing the cluster CA"));
  EXPECT_EQ(Shell(absl::StrCat("cat ", dir, "/ca.pem")), before);
}

TEST(Certs, IssueAddsOneSignedByTheSameCa) {
  const std::string dir = TempDir();
  ASSERT_TRUE(InitCertificates(dir, CertOptions()).ok());
  CertOptions options;
  options.hosts = {"node7"};
  absl::StatusOr<std::vector<std::string>> written =
      IssueCertificate(dir, "w7", kRoleWorker, options);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, (std::vector<std::string>{dir + "/w7.pem", dir + "/w7.key"}));
  EXPECT_THAT(Shell(absl::StrCat("openssl verify -CAfile ", dir, "/ca.pem ", dir, "/w7.pem")),
              HasSubstr(": OK"));
  EXPECT_THAT(Text(dir + "/w7.pem"), HasSubstr("DNS:dtrain-worker, DNS:node7"));
  EXPECT_THAT(Text(dir + "/w7.pem"), HasSubstr("Subject: CN=w7,OU=worker,O=dtrain"));

  EXPECT_EQ(IssueCertificate(dir, "w7", kRoleWorker, options).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(IssueCertificate(dir, "../x", kRoleWorker, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status bad_role = IssueCertificate(dir, "eve", "root", options).status();
  EXPECT_EQ(bad_role.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_role.message(), HasSubstr("coordinator, worker, admin, viewer, user"));
  // A person's certificate: role user, named for them (the jobs it submits record the name).
  ASSERT_TRUE(IssueCertificate(dir, "alice", kRoleUser, options).ok());
  EXPECT_THAT(Text(dir + "/alice.pem"), HasSubstr("Subject: CN=alice,OU=user,O=dtrain"));
  EXPECT_THAT(Shell(absl::StrCat("openssl verify -CAfile ", dir, "/ca.pem ", dir, "/alice.pem")),
              HasSubstr(": OK"));
  EXPECT_EQ(IssueCertificate(TempDir(), "x", kRoleAdmin, options).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Certs, NotAfterInThePastIssuesAnExpiredCertificate) {
  const std::string dir = TempDir();
  ASSERT_TRUE(InitCertificates(dir, CertOptions()).ok());
  CertOptions options;
  absl::StatusOr<absl::Time> end = ParseCertDate("2020-01-01");
  ASSERT_TRUE(end.ok());
  options.not_after = *end;
  ASSERT_TRUE(IssueCertificate(dir, "old", kRoleAdmin, options).ok());
  int status = 0;
  EXPECT_THAT(
      Shell(absl::StrCat("openssl verify -CAfile ", dir, "/ca.pem ", dir, "/old.pem"), &status),
      HasSubstr("certificate has expired"));
  EXPECT_NE(status, 0);
  EXPECT_THAT(Text(dir + "/old.pem"), HasSubstr("Not After : Jan  1 00:00:00 2020 GMT"));
  EXPECT_FALSE(ParseCertDate("yesterday").ok());
}

}  // namespace
}  // namespace client
}  // namespace dtrain
