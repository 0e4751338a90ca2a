// The command line as specifications: the tables drive parsing, validation and every help text.
#include "client/arguments.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string ErrorOf(const std::vector<std::string>& args) {
  absl::StatusOr<Invocation> inv = ParseArguments(args, nullptr);
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument) << args[0];
  return std::string(inv.status().message());
}

TEST(Arguments, DefaultsComeFromTheFlagTable) {
  absl::StatusOr<Invocation> inv = ParseArguments({"list"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->timeout, absl::Seconds(10));
  EXPECT_EQ(inv->reconnect_for, absl::Seconds(60));
  EXPECT_EQ(inv->every, 1);
  EXPECT_EQ(inv->hosts, 1);
  EXPECT_EQ(inv->limit, 0);
  EXPECT_FALSE(inv->rank.has_value());
  EXPECT_TRUE(inv->states.empty());
  EXPECT_FALSE(inv->json);
  EXPECT_EQ(inv->coordinator, kDefaultCoordinator);
}

TEST(Arguments, AnEmptyCoordinatorFlagOrEnvironmentMeansTheDefault) {
  EXPECT_EQ(ParseArguments({"list"}, "")->coordinator, kDefaultCoordinator);
  EXPECT_EQ(ParseArguments({"--coordinator=", "list"}, "")->coordinator, kDefaultCoordinator);
  EXPECT_EQ(ParseArguments({"--coordinator=", "list"}, "h:3")->coordinator, "h:3");
}

TEST(Arguments, EveryTypeParses) {
  absl::StatusOr<Invocation> inv =
      ParseArguments({"logs", "7", "--rank", "2", "--follow", "--timeout=1m"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->rank, 2);
  EXPECT_TRUE(inv->follow);
  EXPECT_EQ(inv->timeout, absl::Minutes(1));
  inv = ParseArguments({"resubmit", "7", "--steps=5000000000", "--noresume"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->steps, 5000000000);
  EXPECT_FALSE(inv->resume);
  inv = ParseArguments({"list", "--state=running,QUEUED", "-limit=4"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->states, (std::vector<JobState>{RUNNING, QUEUED}));
  EXPECT_EQ(inv->limit, 4);
}

TEST(Arguments, ANegativeNumberIsAnArgumentNotAFlag) {
  absl::StatusOr<Invocation> inv = ParseArguments({"priority", "7", "-5"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->args, (std::vector<std::string>{"7", "-5"}));
  EXPECT_THAT(ErrorOf({"priority", "7", "-x"}), HasSubstr("-x"));
}

TEST(Arguments, TraceTakesAStepAndAnOutputFileAlsoAsDashO) {
  absl::StatusOr<Invocation> inv = ParseArguments({"trace", "7"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_FALSE(inv->step.has_value());
  EXPECT_EQ(inv->output, "-");
  inv = ParseArguments({"trace", "7", "--step", "12", "-o", "t.json"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->step, 12);
  EXPECT_EQ(inv->output, "t.json");
  EXPECT_EQ(ErrorOf({"logs", "7", "-o", "t.json"}),
            "flag --output applies to 'trace', 'export-metrics' only, not 'logs'");
}

TEST(Arguments, AFlagOfAnotherCommandNamesTheCommandsThatTakeIt) {
  EXPECT_EQ(ErrorOf({"status", "3", "--every=10"}),
            "flag --every applies to 'watch', 'submit', 'resubmit' only, not 'status'");
  EXPECT_EQ(ErrorOf({"plan", "a.json", "--follow"}),
            "flag --follow applies to 'logs' only, not 'plan'");
}

TEST(Arguments, BoundsNameTheFlagAndTheRule) {
  EXPECT_EQ(ErrorOf({"list", "--limit=-1"}), "--limit must not be negative");
  EXPECT_EQ(ErrorOf({"plan", "a.json", "--workers=-1"}), "--workers must not be negative");
  EXPECT_EQ(ErrorOf({"plan", "a.json", "--hosts=0"}), "--hosts must be at least 1");
  EXPECT_EQ(ErrorOf({"resubmit", "3", "--steps=-5"}), "--steps must not be negative");
  EXPECT_EQ(ErrorOf({"list", "--reconnect_for=-1s"}), "--reconnect_for must not be negative");
  EXPECT_EQ(ErrorOf({"workers", "--forget="}), "--forget needs a value (WORKER_ID)");
  EXPECT_EQ(ErrorOf({"list", "--state="}), "--state needs a value (S1,S2)");
  EXPECT_THAT(ErrorOf({"list", "--json=maybe"}), HasSubstr("bad value for --json: 'maybe'"));
  EXPECT_THAT(ErrorOf({"watch", "3", "--every=often"}),
              HasSubstr("bad value for --every: 'often'"));
}

TEST(Arguments, ValueFlagsDoNotNegate) {
  EXPECT_EQ(ErrorOf({"watch", "3", "--noevery"}), "unknown flag --noevery");
}

TEST(Arguments, VersionAndHelpNeedNoCommandAndNoCoordinator) {
  absl::StatusOr<Invocation> inv = ParseArguments({"--version"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, "version");
  EXPECT_FALSE(NeedsCoordinator(*inv));
  inv = ParseArguments({"list", "--version"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_TRUE(inv->version);
  EXPECT_FALSE(NeedsCoordinator(*inv));
  inv = ParseArguments({"-h"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, "help");
  EXPECT_TRUE(inv->args.empty());
}

TEST(Arguments, HelpOfOneCommand) {
  absl::StatusOr<Invocation> inv = ParseArguments({"help", "watch"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->args, std::vector<std::string>{"watch"});
  inv = ParseArguments({"watch", "--help"}, nullptr);  // no JOB: help needs none
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, "help");
  EXPECT_EQ(inv->args, std::vector<std::string>{"watch"});
  EXPECT_THAT(ErrorOf({"help", "frobnicate"}), HasSubstr("unknown command 'frobnicate'"));
}

TEST(Arguments, OnlyCommandsThatCallTheCoordinatorNeedIt) {
  for (const CommandInfo& command : Commands()) {
    std::vector<std::string> args = {command.name};
    for (int i = 0; i < command.min_args; ++i) args.push_back("x");
    absl::StatusOr<Invocation> inv = ParseArguments(args, nullptr);
    ASSERT_TRUE(inv.ok()) << command.name << ": " << inv.status();
    const bool offline =
        std::string(command.name) == "plan" || std::string(command.name) == "export" ||
        std::string(command.name) == "certs" || std::string(command.name) == "data" ||
        std::string(command.name) == "help" || std::string(command.name) == "version";
    EXPECT_EQ(NeedsCoordinator(*inv), !offline) << command.name;
  }
}

TEST(Arguments, TheHelpListsEveryCommandAndFlagWithItsDefault) {
  const std::string usage = Usage();
  for (const CommandInfo& command : Commands()) {
    EXPECT_THAT(usage, HasSubstr(absl::StrCat("\n  ", command.name))) << command.name;
  }
  for (const FlagInfo& flag : Flags()) {
    EXPECT_THAT(usage, HasSubstr(absl::StrCat("--", flag.name))) << flag.name;
  }
  EXPECT_THAT(usage, HasSubstr("--timeout=DURATION"));
  EXPECT_THAT(usage, HasSubstr("(default 10s)"));
  EXPECT_THAT(usage, HasSubstr("watch, submit, resubmit: a step line every N steps"));
  EXPECT_THAT(usage, HasSubstr("exit status:"));
  for (absl::string_view line : absl::StrSplit(usage, '\n')) {
    EXPECT_LE(line.size(), 96u) << line;
  }
}

TEST(Arguments, ACommandsHelpListsItsOwnFlagsAndTheGlobalOnes) {
  const std::string watch = CommandUsage("watch");
  EXPECT_THAT(watch, HasSubstr("usage: dtrain [flags] watch JOB [--quiet] [--every=N]\n"));
  EXPECT_THAT(watch, HasSubstr("flags of watch:\n  --quiet"));
  EXPECT_THAT(watch, HasSubstr("--every=N"));
  EXPECT_THAT(watch, HasSubstr("--coordinator=HOST:PORT"));
  EXPECT_THAT(watch, Not(HasSubstr("--limit")));
  EXPECT_THAT(CommandUsage("workers"), HasSubstr("--forget=WORKER_ID"));
  EXPECT_THAT(CommandUsage("version"), Not(HasSubstr("flags of version")));
}

// A fake environment for TlsFilesOf: DTRAIN_TLS_* point at env-*.pem, DTRAIN_INSECURE as set.
const char* g_insecure_env = nullptr;
char* FakeEnv(const char* name) {
  static char ca[] = "env-ca.pem", cert[] = "env-cert.pem", key[] = "env-key.pem";
  if (std::string(name) == kTlsCaEnv) return ca;
  if (std::string(name) == kTlsCertEnv) return cert;
  if (std::string(name) == kTlsKeyEnv) return key;
  if (std::string(name) == kInsecureEnv) return const_cast<char*>(g_insecure_env);
  return nullptr;
}
char* NoEnv(const char*) { return nullptr; }

TEST(Arguments, TlsFlagsWinOverTheEnvironment) {
  absl::StatusOr<Invocation> inv = ParseArguments({"list", "--tls_cert=mine.pem"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  TlsFiles tls = TlsFilesOf(*inv, FakeEnv);
  EXPECT_EQ(tls.ca, "env-ca.pem");
  EXPECT_EQ(tls.cert, "mine.pem");
  EXPECT_EQ(tls.key, "env-key.pem");
  EXPECT_FALSE(tls.insecure);

  inv = ParseArguments({"list", "--insecure"}, nullptr);
  tls = TlsFilesOf(*inv, FakeEnv);
  EXPECT_TRUE(tls.insecure);
  EXPECT_TRUE(tls.ca.empty() && tls.cert.empty() && tls.key.empty());
  EXPECT_TRUE(ValidateTlsFiles(tls, "dtrain").ok());

  inv = ParseArguments({"list", "--insecure", "--tls_ca=ca.pem"}, nullptr);
  EXPECT_EQ(ValidateTlsFiles(TlsFilesOf(*inv, NoEnv), "dtrain").code(),
            absl::StatusCode::kInvalidArgument);

  inv = ParseArguments({"list"}, nullptr);
  auto insecure_only = [](const char* name) -> char* {
    return std::string(name) == kInsecureEnv ? const_cast<char*>("1") : nullptr;
  };
  EXPECT_TRUE(TlsFilesOf(*inv, insecure_only).insecure);
  g_insecure_env = "1";
  EXPECT_FALSE(TlsFilesOf(*ParseArguments({"list", "--tls_ca=a"}, nullptr), FakeEnv).insecure);
  g_insecure_env = nullptr;
  EXPECT_THAT(ValidateTlsFiles(TlsFilesOf(*inv, NoEnv), "dtrain").message(),
              HasSubstr("dtrain needs --tls_ca, --tls_cert and --tls_key"));
}

}  // namespace
}  // namespace client
}  // namespace dtrain
