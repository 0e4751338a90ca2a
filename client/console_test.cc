// The console's rules that need no server: which --listen it accepts, how coordinator errors
// become HTTP statuses, and that its pages and Debian's dygraphs are embedded.
#include "client/console_http.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "client/console_assets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/job_sample.h"

namespace dtrain::client {
namespace {

using ::testing::HasSubstr;

TEST(ParseListenAddress, LoopbackNeedsNoFlag) {
  for (const char* listen : {"127.0.0.1:8080", "localhost:1", "[::1]:65535", "127.1.2.3:80"}) {
    absl::StatusOr<ListenAddress> address = ParseListenAddress(listen, false);
    ASSERT_TRUE(address.ok()) << listen << ": " << address.status();
    EXPECT_TRUE(address->loopback) << listen;
  }
  absl::StatusOr<ListenAddress> v6 = ParseListenAddress("[::1]:8080", false);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 8080);
}

TEST(ParseListenAddress, PublicAddressNeedsListenPublic) {
  for (const char* listen : {"0.0.0.0:8080", "10.0.0.5:8080", "[::]:8080", "127.example:80",
                             "128.0.0.1:80", "127.0.0.1.5:80"}) {
    absl::StatusOr<ListenAddress> refused = ParseListenAddress(listen, false);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << listen;
    EXPECT_THAT(refused.status().message(), HasSubstr("--listen_public")) << listen;
    absl::StatusOr<ListenAddress> allowed = ParseListenAddress(listen, true);
    ASSERT_TRUE(allowed.ok()) << listen << ": " << allowed.status();
    EXPECT_FALSE(allowed->loopback) << listen;
  }
}

TEST(ParseListenAddress, MalformedIsRefusedNamingTheFlag) {
  for (const char* listen : {"8080", "127.0.0.1:", ":8080", "127.0.0.1:0", "127.0.0.1:65536",
                             "127.0.0.1:80x", "[::1:80", "127.0.0.1:-1"}) {
    absl::StatusOr<ListenAddress> refused = ParseListenAddress(listen, true);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << listen;
    EXPECT_THAT(refused.status().message(), HasSubstr("bad value for --listen")) << listen;
  }
}

TEST(HttpStatusFor, CoordinatorCodes) {
  EXPECT_EQ(HttpStatusFor(absl::OkStatus()), 200);
  EXPECT_EQ(HttpStatusFor(absl::PermissionDeniedError("viewer")), 403);
  EXPECT_EQ(HttpStatusFor(absl::UnauthenticatedError("")), 403);
  EXPECT_EQ(HttpStatusFor(absl::NotFoundError("")), 404);
  EXPECT_EQ(HttpStatusFor(absl::InvalidArgumentError("")), 400);
  EXPECT_EQ(HttpStatusFor(absl::FailedPreconditionError("ended")), 409);
  EXPECT_EQ(HttpStatusFor(absl::ResourceExhaustedError("a sample is being drawn")), 429);
  EXPECT_EQ(HttpStatusFor(absl::UnavailableError("")), 502);
  EXPECT_EQ(HttpStatusFor(absl::DeadlineExceededError("")), 504);
  EXPECT_EQ(HttpStatusFor(absl::InternalError("")), 500);
}

// A sample asked from the page: absent parameters keep the defaults; each out of its range is
// refused naming it; a prompt over the bound too.
TEST(ParseSampleParameters, DefaultsBoundsAndTheParameterNamed) {
  absl::flat_hash_map<std::string, std::string> query;
  auto get = [&query](const char* name) {
    auto it = query.find(name);
    return it == query.end() ? std::string() : it->second;
  };
  SampleParameters defaults;
  defaults.set_tokens(32);
  defaults.set_temperature(1);
  defaults.set_seed(1337);
  absl::StatusOr<SampleParameters> p = ParseSampleParameters(get, "The ", defaults);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prompt(), "The ");
  EXPECT_EQ(p->tokens(), 32);
  EXPECT_EQ(p->temperature(), 1);
  EXPECT_EQ(p->seed(), 1337);
  query = {{"tokens", "12"}, {"temperature", "0.8"}, {"top_k", "40"}, {"seed", "7"}};
  p = ParseSampleParameters(get, "", defaults);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->tokens(), 12);
  EXPECT_EQ(p->temperature(), 0.8);
  EXPECT_EQ(p->top_k(), 40);
  EXPECT_EQ(p->seed(), 7);
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"tokens", "0"},
                                                        {"tokens", "1025"},
                                                        {"tokens", "ten"},
                                                        {"top_k", "-1"},
                                                        {"seed", "-3"},
                                                        {"temperature", "-0.5"},
                                                        {"temperature", "nan"},
                                                        {"temperature", "inf"},
                                                        {"temperature", "warm"},
                                                        {"temperature", "101"}}) {
    query = {{name, value}};
    p = ParseSampleParameters(get, "", defaults);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << name << "=" << value;
    EXPECT_THAT(p.status().message(), HasSubstr(absl::StrCat(name, "=", value, ": ")));
  }
  query.clear();
  p = ParseSampleParameters(get, std::string(plan::kMaxSamplePromptBytes + 1, 'x'), defaults);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("the prompt is longer than 4096 bytes"));
  EXPECT_TRUE(
      ParseSampleParameters(get, std::string(plan::kMaxSamplePromptBytes, 'x'), defaults).ok());
}

TEST(HostAllowed, LoopbackOnlyItsOwnNames) {
  const ListenAddress listen = *ParseListenAddress("127.0.0.1:8080", false);
  for (const char* host : {"127.0.0.1:8080", "localhost:8080", "[::1]:8080"}) {
    EXPECT_TRUE(HostAllowed(listen, host)) << host;
  }
  for (const char* host :
       {"evil.example:8080", "127.0.0.1:8081", "127.0.0.1", "localhost", "10.0.0.5:8080", ""}) {
    EXPECT_FALSE(HostAllowed(listen, host)) << host;
  }
  EXPECT_FALSE(HostAllowed(listen, nullptr));
  const ListenAddress v6 = *ParseListenAddress("[::1]:9000", false);
  EXPECT_TRUE(HostAllowed(v6, "[::1]:9000"));
  EXPECT_FALSE(HostAllowed(v6, "::1:9000"));
}

TEST(HostAllowed, PublicAcceptsAnyNameTheTokenGuards) {
  const ListenAddress listen = *ParseListenAddress("0.0.0.0:8080", true);
  EXPECT_TRUE(HostAllowed(listen, "gpu-login-3.example:8080"));
  EXPECT_TRUE(HostAllowed(listen, nullptr));
}

TEST(EventStreamText, RunsOfStepsAreOneEventEachOtherUpdateItsOwn) {
  EXPECT_EQ(EventStreamText({}), "");
  EXPECT_EQ(EventStreamText({{true, "{\"step\":1}"}}), "event: steps\ndata: [{\"step\":1}]\n\n");
  EXPECT_EQ(EventStreamText({{true, "1"}, {true, "2"}, {false, "S"}, {true, "3"}, {false, "E"}}),
            "event: steps\ndata: [1,2]\n\ndata: S\n\nevent: steps\ndata: [3]\n\ndata: E\n\n");
}

TEST(RandomToken, ThirtyTwoHexDigitsNeverTheSame) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::string> token = RandomToken();
    ASSERT_TRUE(token.ok()) << token.status();
    EXPECT_EQ(token->size(), 32u);
    EXPECT_EQ(token->find_first_not_of("0123456789abcdef"), std::string::npos) << *token;
    seen.insert(*token);
  }
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_TRUE(SameSecret("abc", "abc"));
  EXPECT_FALSE(SameSecret("abc", "abd"));
  EXPECT_FALSE(SameSecret("abc", "abcd"));
  EXPECT_FALSE(SameSecret("", "a"));
}

TEST(ConsoleAssets, PagesAndDygraphsAreEmbedded) {
  for (const char* path :
       {"/index.html", "/job.html", "/workers.html", "/compare.html", "/console.js", "/curve.js",
        "/job_actions.js", "/console.css", "/dygraph.min.js", "/dygraph.min.css", "/d3.min.js"}) {
    const ConsoleAsset* asset = FindConsoleAsset(path);
    ASSERT_NE(asset, nullptr) << path;
    EXPECT_GT(asset->body.size(), 100u) << path;
  }
  EXPECT_THAT(std::string(FindConsoleAsset("/dygraph.min.js")->body), HasSubstr("Dygraph"));
  EXPECT_EQ(FindConsoleAsset("/nothing.html"), nullptr);
  EXPECT_EQ(FindConsoleAsset("/"), nullptr);
}

}  // namespace
}  // namespace dtrain::client
