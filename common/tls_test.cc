// common/tls: the settings rule's messages, and real mutual-TLS servers and channels on
// 127.0.0.1 with certificates made by the `openssl` command (the oracle, independent of
// dtrain's own certificate maker): who is let in, who is not, what identity a handler sees,
// the worker peer name, and certificate files renewed under a running server.
#include "common/tls.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  std::string dir = absl::StrCat(::testing::TempDir(), "/tls_test_", getpid(), "_",
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
  EXPECT_EQ(std::system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str()), 0);
  return dir;
}

void Shell(const std::string& command) {
  ASSERT_EQ(std::system(absl::StrCat(command, " 2>/dev/null >/dev/null").c_str()), 0) << command;
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// DIR/NAME.pem + DIR/NAME.key: a self-signed CA.
void MakeCa(const std::string& dir, const std::string& name) {
  Shell(absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2",
                     " -subj /CN=", name, " -keyout ", dir, "/", name, ".key -out ", dir, "/", name,
                     ".pem -addext basicConstraints=critical,CA:TRUE",
                     " -addext keyUsage=critical,keyCertSign"));
}

// DIR/NAME.pem + DIR/NAME.key signed by DIR/CA: subject CN=NAME OU=ROLE, SANs `sans`
// ("DNS:localhost,IP:127.0.0.1").
void Issue(const std::string& dir, const std::string& ca, const std::string& name,
           const std::string& role, const std::string& sans) {
  std::string base = absl::StrCat(dir, "/", name);
  WriteFile(base + ".ext",
            absl::StrCat("subjectAltName=", sans, "\nextendedKeyUsage=serverAuth,clientAuth\n"));
  Shell(absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=",
                     name, "/OU=", role, " -keyout ", base, ".key -out ", base, ".csr"));
  Shell(absl::StrCat("openssl x509 -req -in ", base, ".csr -CA ", dir, "/", ca, ".pem -CAkey ", dir,
                     "/", ca, ".key -CAcreateserial -days 2 -extfile ", base, ".ext -out ", base,
                     ".pem"));
}

TlsFiles Files(const std::string& dir, const std::string& ca, const std::string& name) {
  return TlsFiles{absl::StrCat(dir, "/", ca, ".pem"), absl::StrCat(dir, "/", name, ".pem"),
                  absl::StrCat(dir, "/", name, ".key")};
}

// Answers every call with "NAME/ROLE" of the caller (PeerIdentityOf), or "error: ...".
class WhoAmIService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(grpc::GenericCallbackServerContext* context) {
        absl::StatusOr<PeerIdentity> who = PeerIdentityOf(*context);
        std::string text = who.ok() ? absl::StrCat(who->name, "/", who->role)
                                    : absl::StrCat("error: ", who.status().message());
        grpc::Slice slice(text);
        reply_ = grpc::ByteBuffer(&slice, 1);
        StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer reply_;
    };
    return new Reactor(context);
  }
};

struct Server {
  WhoAmIService service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

std::unique_ptr<Server> StartServer(const TlsFiles& files,
                                    absl::Duration reload = kDefaultTlsReloadInterval) {
  auto s = std::make_unique<Server>();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = ServerCredentials(files, reload);
  EXPECT_TRUE(creds.ok()) << creds.status();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", *creds, &s->port);
  builder.RegisterCallbackGenericService(&s->service);
  s->server = builder.BuildAndStart();
  EXPECT_NE(s->port, 0);
  return s;
}

struct CallResult {
  grpc::Status status;
  std::string reply;        // what the server said: the caller's NAME/ROLE
  std::string server_name;  // the server certificate's CN, as the client saw it
};

CallResult Call(int port, std::shared_ptr<grpc::ChannelCredentials> creds,
                const grpc::ChannelArguments& args = grpc::ChannelArguments(),
                const std::string& host = "127.0.0.1") {
  auto channel = grpc::CreateCustomChannel(absl::StrCat(host, ":", port), creds, args);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  CallResult result;
  absl::Notification done;
  stub.UnaryCall(&context, "/test.WhoAmI/Ask", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   result.status = s;
                   done.Notify();
                 });
  done.WaitForNotification();
  if (result.status.ok()) {
    grpc::Slice slice;
    EXPECT_TRUE(response.TrySingleSlice(&slice).ok());
    result.reply = std::string(reinterpret_cast<const char*>(slice.begin()), slice.size());
    auto cn = context.auth_context()->FindPropertyValues("x509_common_name");
    if (!cn.empty()) result.server_name = std::string(cn[0].data(), cn[0].size());
  }
  return result;
}

std::shared_ptr<grpc::ChannelCredentials> Creds(const TlsFiles& files) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = ChannelCredentials(files);
  EXPECT_TRUE(creds.ok()) << creds.status();
  return *creds;
}

TEST(ValidateTlsFiles, NeitherFilesNorInsecureSaysWhatToPass) {
  absl::Status s = ValidateTlsFiles(TlsFiles{}, "the coordinator");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "the coordinator needs --tls_ca, --tls_cert and --tls_key (make them with `dtrain "
            "certs init DIR`), or --insecure to run without TLS (anyone who can reach the port "
            "controls the cluster)");
}

TEST(ValidateTlsFiles, InsecureAloneIsOk) {
  TlsFiles files;
  files.insecure = true;
  EXPECT_TRUE(ValidateTlsFiles(files, "the worker").ok());
}

TEST(ValidateTlsFiles, BothFilesAndInsecureIsRefused) {
  TlsFiles files{"ca.pem", "w.pem", "w.key", /*insecure=*/true};
  absl::Status s = ValidateTlsFiles(files, "the worker");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not both"));
}

TEST(ValidateTlsFiles, NamesTheMissingFlags) {
  absl::Status s = ValidateTlsFiles(TlsFiles{"ca.pem", "", ""}, "dtrain");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("missing --tls_cert and --tls_key"));
}

TEST(ValidateTlsFiles, UnreadableNotPemAndMismatchedKeyAreNamed) {
  std::string dir = TempDir();
  MakeCa(dir, "ca");
  Issue(dir, "ca", "alice", "admin", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "ca", "bob", "viewer", "DNS:localhost,IP:127.0.0.1");
  TlsFiles files = Files(dir, "ca", "alice");
  EXPECT_TRUE(ValidateTlsFiles(files, "dtrain").ok());

  TlsFiles missing = files;
  missing.ca = dir + "/nope.pem";
  absl::Status s = ValidateTlsFiles(missing, "dtrain");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("--tls_ca"));
  EXPECT_THAT(s.message(), HasSubstr("nope.pem"));

  TlsFiles not_pem = files;
  not_pem.cert = dir + "/alice.ext";
  s = ValidateTlsFiles(not_pem, "dtrain");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--tls_cert " + dir + "/alice.ext is not a PEM certificate"));

  TlsFiles key_is_cert = files;
  key_is_cert.key = files.cert;
  s = ValidateTlsFiles(key_is_cert, "dtrain");
  EXPECT_THAT(s.message(), HasSubstr("is not a PEM private key"));

  TlsFiles other_key = files;
  other_key.key = dir + "/bob.key";
  s = ValidateTlsFiles(other_key, "dtrain");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is not the private key of --tls_cert"));

  absl::StatusOr<std::string> described = DescribeCertificateFile(files.cert);
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_THAT(*described, HasSubstr("CN=alice OU=admin, valid "));
}

TEST(MutualTls, HandlerSeesTheCallersNameAndRole) {
  std::string dir = TempDir();
  MakeCa(dir, "ca");
  Issue(dir, "ca", "coordinator", "coordinator", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "ca", "alice", "admin", "DNS:localhost,IP:127.0.0.1");
  std::unique_ptr<Server> server = StartServer(Files(dir, "ca", "coordinator"));
  CallResult r = Call(server->port, Creds(Files(dir, "ca", "alice")));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.reply, "alice/admin");
  EXPECT_EQ(r.server_name, "coordinator");
}

// PeerIdentityOf remembers identities by certificate: callers with other certificates, one
// after another and again, each still get their own.
TEST(MutualTls, EachCertificateKeepsItsOwnIdentityOnRepeatedCalls) {
  std::string dir = TempDir();
  MakeCa(dir, "ca");
  Issue(dir, "ca", "coordinator", "coordinator", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "ca", "alice", "admin", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "ca", "bob", "viewer", "DNS:localhost,IP:127.0.0.1");
  std::unique_ptr<Server> server = StartServer(Files(dir, "ca", "coordinator"));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Call(server->port, Creds(Files(dir, "ca", "alice"))).reply, "alice/admin");
    EXPECT_EQ(Call(server->port, Creds(Files(dir, "ca", "bob"))).reply, "bob/viewer");
  }
}

TEST(MutualTls, RefusesNoCertificateAnotherCaAndPlaintext) {
  std::string dir = TempDir();
  MakeCa(dir, "ca");
  MakeCa(dir, "other_ca");
  Issue(dir, "ca", "coordinator", "coordinator", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "other_ca", "mallory", "admin", "DNS:localhost,IP:127.0.0.1");
  std::unique_ptr<Server> server = StartServer(Files(dir, "ca", "coordinator"));

  // Trusts the right CA but presents no certificate.
  grpc::SslCredentialsOptions no_cert;
  std::ifstream ca(dir + "/ca.pem");
  no_cert.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
  EXPECT_EQ(Call(server->port, grpc::SslCredentials(no_cert)).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);

  // A certificate from another CA (trusting the right CA for the server's).
  TlsFiles mallory = Files(dir, "other_ca", "mallory");
  mallory.ca = dir + "/ca.pem";
  EXPECT_EQ(Call(server->port, Creds(mallory)).status.error_code(), grpc::StatusCode::UNAVAILABLE);

  // Plaintext.
  EXPECT_EQ(Call(server->port, grpc::InsecureChannelCredentials()).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);

  // A client that trusts another CA does not accept the server.
  TlsFiles wrong_trust = Files(dir, "other_ca", "mallory");
  EXPECT_EQ(Call(server->port, Creds(wrong_trust)).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// Moving to a new CA without downtime: a ca.pem holding both CAs lets certificates of either
// in, on both sides; one of a third CA stays out.
TEST(MutualTls, ACaBundleTrustsCertificatesOfEitherCa) {
  std::string dir = TempDir();
  MakeCa(dir, "old_ca");
  MakeCa(dir, "new_ca");
  MakeCa(dir, "third_ca");
  Issue(dir, "old_ca", "coordinator", "coordinator", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "new_ca", "alice", "admin", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "third_ca", "mallory", "admin", "DNS:localhost,IP:127.0.0.1");
  Shell(absl::StrCat("sh -c 'cat ", dir, "/old_ca.pem ", dir, "/new_ca.pem > ", dir, "/both.pem'"));
  std::unique_ptr<Server> server = StartServer(Files(dir, "both", "coordinator"));
  CallResult r = Call(server->port, Creds(Files(dir, "both", "alice")));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.reply, "alice/admin");
  EXPECT_EQ(Call(server->port, Creds(Files(dir, "both", "mallory"))).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST(MutualTls, InsecureServerSeesRoleInsecure) {
  TlsFiles insecure;
  insecure.insecure = true;
  std::unique_ptr<Server> server = StartServer(insecure);
  CallResult r = Call(server->port, Creds(insecure));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.reply, "/insecure");
}

TEST(MutualTls, WorkerPeersAreDialledByIpAndVerifiedByTheWorkerName) {
  std::string dir = TempDir();
  MakeCa(dir, "ca");
  // As `dtrain certs` makes them: the worker name only, no IP.
  Issue(dir, "ca", "w1", "worker", absl::StrCat("DNS:", kWorkerPeerHostname));
  Issue(dir, "ca", "w2", "worker", absl::StrCat("DNS:", kWorkerPeerHostname));
  std::unique_ptr<Server> server = StartServer(Files(dir, "ca", "w1"));
  TlsFiles w2 = Files(dir, "ca", "w2");
  grpc::ChannelArguments args;
  SetPeerChannelArguments(w2, &args);
  // 127.0.0.1 is not in the worker certificate: only the peer name makes it verify. (Not
  // "localhost": c-ares, which would resolve it, leaks 20 bytes under --config=asan.)
  CallResult r = Call(server->port, Creds(w2), args);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.reply, "w2/worker");
  EXPECT_EQ(Call(server->port, Creds(w2)).status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(MutualTls, RenewedServerCertificateIsUsedWithoutRestart) {
  std::string dir = TempDir();
  MakeCa(dir, "ca");
  Issue(dir, "ca", "coordinator", "coordinator", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "ca", "renewed", "coordinator", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "ca", "alice", "admin", "DNS:localhost,IP:127.0.0.1");
  TlsFiles server_files = Files(dir, "ca", "coordinator");
  std::unique_ptr<Server> server = StartServer(server_files, absl::Seconds(1));
  EXPECT_EQ(Call(server->port, Creds(Files(dir, "ca", "alice"))).server_name, "coordinator");

  // Replace key and certificate (each by a rename, key first).
  Shell(absl::StrCat("cp ", dir, "/renewed.key ", dir, "/tmp.key && mv ", dir, "/tmp.key ",
                     server_files.key));
  Shell(absl::StrCat("cp ", dir, "/renewed.pem ", dir, "/tmp.pem && mv ", dir, "/tmp.pem ",
                     server_files.cert));
  std::string seen;
  for (int i = 0; i < 50 && seen != "renewed"; ++i) {
    absl::SleepFor(absl::Milliseconds(200));
    seen = Call(server->port, Creds(Files(dir, "ca", "alice"))).server_name;  // a new channel
  }
  EXPECT_EQ(seen, "renewed");
}

// A long-lived channel (a worker's to the coordinator): after its client files are replaced,
// its next connection presents the new certificate, without a new channel.
TEST(MutualTls, RenewedClientCertificateIsUsedByTheChannelsNextConnection) {
  std::string dir = TempDir();
  MakeCa(dir, "ca");
  Issue(dir, "ca", "coordinator", "coordinator", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "ca", "w1", "worker", "DNS:localhost,IP:127.0.0.1");
  Issue(dir, "ca", "w1-renewed", "worker", "DNS:localhost,IP:127.0.0.1");
  std::unique_ptr<Server> server = StartServer(Files(dir, "ca", "coordinator"));
  const int port = server->port;
  TlsFiles client = Files(dir, "ca", "w1");
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      ChannelCredentials(client, absl::Seconds(1));
  ASSERT_TRUE(creds.ok()) << creds.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), *creds);
  auto ask = [&channel] {
    grpc::GenericStub stub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    context.set_wait_for_ready(true);
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    grpc::Status status;
    absl::Notification done;
    stub.UnaryCall(&context, "/test.WhoAmI/Ask", grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = s;
                     done.Notify();
                   });
    done.WaitForNotification();
    grpc::Slice slice;
    if (!status.ok() || !response.TrySingleSlice(&slice).ok()) return status.error_message();
    return std::string(reinterpret_cast<const char*>(slice.begin()), slice.size());
  };
  EXPECT_EQ(ask(), "w1/worker");

  Shell(absl::StrCat("cp ", dir, "/w1-renewed.key ", dir, "/tmp.key && mv ", dir, "/tmp.key ",
                     client.key));
  Shell(absl::StrCat("cp ", dir, "/w1-renewed.pem ", dir, "/tmp.pem && mv ", dir, "/tmp.pem ",
                     client.cert));
  absl::SleepFor(absl::Milliseconds(2500));  // the watcher's interval, and then some
  // The coordinator restarts on the same port: the channel reconnects, with the renewed files.
  server->server->Shutdown(std::chrono::system_clock::now());
  server.reset();
  auto again = std::make_unique<Server>();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_creds =
      ServerCredentials(Files(dir, "ca", "coordinator"));
  ASSERT_TRUE(server_creds.ok());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), *server_creds, &again->port);
  builder.RegisterCallbackGenericService(&again->service);
  again->server = builder.BuildAndStart();
  ASSERT_EQ(again->port, port);
  EXPECT_EQ(ask(), "w1-renewed/worker");
}

}  // namespace
}  // namespace dtrain
