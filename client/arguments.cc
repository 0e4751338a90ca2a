#include "client/arguments.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "absl/flags/marshalling.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace dtrain {
namespace client {
namespace {

constexpr int kManyArgs = 1000;
constexpr char kJobArgument[] = "a job id (job-000012, 12 or a job name)";
const std::vector<std::string> kWatching = {"watch", "submit", "resubmit"};

// Help layout: descriptions start at this column and lines end before kWidth.
constexpr size_t kHelpColumn = 33;
constexpr size_t kWidth = 96;

// "RUNNING,queued" -> {RUNNING, QUEUED}; INVALID_ARGUMENT naming the unknown state.
absl::StatusOr<std::vector<JobState>> ParseStates(absl::string_view text) {
  std::vector<JobState> states;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    JobState state;
    const std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(part));
    if (!JobState_Parse(name, &state) || state == JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad value for --state: '", part,
          "' is not a job state (QUEUED, PLACING, RUNNING, RECOVERING, SUCCEEDED, FAILED, "
          "CANCELLED)"));
    }
    states.push_back(state);
  }
  return states;
}

// absl's parser for the flag's type, so values read like every dtrain binary's flags ("10s",
// "true"); INVALID_ARGUMENT naming the flag and the value.
template <typename T>
absl::Status ParseTyped(const FlagInfo& flag, absl::string_view text, T* value) {
  std::string error;
  if (absl::ParseFlag(text, value, &error)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("bad value for --", flag.name, ": '", text, "'",
                                                 error.empty() ? "" : " (" + error + ")"));
}

// Stores `text` as the flag's value in `inv`.
absl::Status SetValue(const FlagInfo& flag, absl::string_view text, Invocation& inv) {
  struct Setter {
    const FlagInfo& flag;
    absl::string_view text;
    Invocation& inv;
    absl::Status operator()(bool Invocation::*m) { return ParseTyped(flag, text, &(inv.*m)); }
    absl::Status operator()(int Invocation::*m) { return ParseTyped(flag, text, &(inv.*m)); }
    absl::Status operator()(int64_t Invocation::*m) { return ParseTyped(flag, text, &(inv.*m)); }
    absl::Status operator()(absl::Duration Invocation::*m) {
      return ParseTyped(flag, text, &(inv.*m));
    }
    absl::Status operator()(std::string Invocation::*m) {
      inv.*m = std::string(text);
      return absl::OkStatus();
    }
    absl::Status operator()(std::vector<JobState> Invocation::*m) {
      ASSIGN_OR_RETURN(inv.*m, ParseStates(text));
      return absl::OkStatus();
    }
    absl::Status operator()(std::optional<int> Invocation::*m) {
      if (text.empty()) {
        (inv.*m).reset();
        return absl::OkStatus();
      }
      int value = 0;
      RETURN_IF_ERROR(ParseTyped(flag, text, &value));
      inv.*m = value;
      return absl::OkStatus();
    }
  };
  return std::visit(Setter{flag, text, inv}, flag.target);
}

// The flag's value in `inv` as a number, for its bound; nullopt for flags that are not numbers.
std::optional<double> NumericValue(const FlagInfo& flag, const Invocation& inv) {
  if (auto m = std::get_if<int Invocation::*>(&flag.target)) return inv.**m;
  if (auto m = std::get_if<int64_t Invocation::*>(&flag.target)) return inv.**m;
  if (auto m = std::get_if<std::optional<int> Invocation::*>(&flag.target)) {
    if ((inv.**m).has_value()) return *(inv.**m);
  }
  if (auto m = std::get_if<absl::Duration Invocation::*>(&flag.target)) {
    return absl::ToDoubleSeconds(inv.**m);
  }
  return std::nullopt;
}

bool IsEmptyValue(const FlagInfo& flag, const Invocation& inv) {
  if (auto m = std::get_if<std::string Invocation::*>(&flag.target)) return (inv.**m).empty();
  if (auto m = std::get_if<std::vector<JobState> Invocation::*>(&flag.target)) {
    return (inv.**m).empty();
  }
  return false;
}

// OK when the flag's value in `inv` keeps its bound; else INVALID_ARGUMENT saying the rule.
absl::Status CheckBound(const FlagInfo& flag, const Invocation& inv) {
  const std::optional<double> number = NumericValue(flag, inv);
  const char* rule = nullptr;
  switch (flag.bound) {
    case FlagBound::kAny:
      break;
    case FlagBound::kNotNegative:
      if (number.has_value() && *number < 0) rule = "must not be negative";
      break;
    case FlagBound::kPositive:
      if (number.has_value() && *number <= 0) rule = "must be positive";
      break;
    case FlagBound::kAtLeastOne:
      if (number.has_value() && *number < 1) rule = "must be at least 1";
      break;
    case FlagBound::kNotEmpty:
      if (IsEmptyValue(flag, inv)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag.name, " needs a value (", flag.value_name, ")"));
      }
      break;
  }
  if (rule == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag.name, " ", rule));
}

bool IsBool(const FlagInfo& flag) {
  return std::holds_alternative<bool Invocation::*>(flag.target);
}

const FlagInfo* FindFlag(absl::string_view name) {
  for (const FlagInfo& flag : Flags()) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

bool TakesFlag(const CommandInfo& command, const FlagInfo& flag) {
  return flag.commands.empty() ||
         std::find(flag.commands.begin(), flag.commands.end(), command.name) != flag.commands.end();
}

// `text` as lines of at most kWidth columns, every line but the first indented by `indent`
// columns; the first continues a line already `first_column` wide.
std::string Wrap(absl::string_view text, size_t first_column, size_t indent) {
  std::string out;
  size_t column = first_column;
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && column + 1 + word.size() > kWidth) {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    absl::StrAppend(&out, word);
    column += word.size();
    line_empty = false;
  }
  return out;
}

// "  name  help", the help wrapped at kHelpColumn (on the next line when the name is too wide).
std::string HelpRow(const std::string& name, const std::string& help) {
  std::string row = absl::StrCat("  ", name);
  if (row.size() + 1 > kHelpColumn) {
    absl::StrAppend(&row, "\n", std::string(kHelpColumn, ' '));
  } else {
    row.resize(kHelpColumn, ' ');
  }
  absl::StrAppend(&row, Wrap(help, kHelpColumn, kHelpColumn), "\n");
  return row;
}

// "--every=N", "--watch".
std::string FlagSynopsis(const FlagInfo& flag) {
  return IsBool(flag) ? absl::StrCat("--", flag.name)
                      : absl::StrCat("--", flag.name, "=", flag.value_name);
}

// "watch JOB [--quiet] [--every=N]".
std::string CommandSynopsis(const CommandInfo& command) {
  std::string synopsis = command.name;
  if (*command.args != '\0') absl::StrAppend(&synopsis, " ", command.args);
  // Its flags while the line stays short; "[...]" for the rest (`dtrain help COMMAND` lists all).
  constexpr size_t kMaxSynopsis = 72;
  for (const FlagInfo& flag : Flags()) {
    if (!flag.commands.empty() && TakesFlag(command, flag)) {
      const std::string more = absl::StrCat(" [", FlagSynopsis(flag), "]");
      if (synopsis.size() + more.size() > kMaxSynopsis) return synopsis + " [...]";
      synopsis += more;
    }
  }
  return synopsis;
}

// One flag's help row: its synopsis, help, the commands that take it and its default.
std::string FlagRow(const FlagInfo& flag, bool name_commands) {
  std::string help = flag.help;
  if (name_commands && !flag.commands.empty()) {
    help = absl::StrCat(absl::StrJoin(flag.commands, ", "), ": ", help);
  }
  const std::string shown_default = *flag.default_text != '\0' ? flag.default_text
                                    : IsBool(flag)             ? ""
                                                               : flag.default_value;
  if (!shown_default.empty()) absl::StrAppend(&help, " (default ", shown_default, ")");
  return HelpRow(FlagSynopsis(flag), help);
}

std::string GlobalFlagRows() {
  std::string rows;
  for (const FlagInfo& flag : Flags()) {
    if (flag.commands.empty()) rows += FlagRow(flag, false);
  }
  return rows;
}

constexpr char kExitCodes[] = R"(exit status:
  0  success; for watch and submit --watch: the job SUCCEEDED
  1  the job FAILED
  2  usage or bad input: bad flag, unreadable or empty file, spec rejected (INVALID_ARGUMENT),
     a job name that several jobs have; plan: a spec or schedule that cannot run
  3  the coordinator is unreachable (UNAVAILABLE, DEADLINE_EXCEEDED)
  4  not found (unknown job id or name, unknown worker)
  5  the job was CANCELLED
  6  any other error from the coordinator (e.g. forgetting a worker that is not LOST)
  130  Ctrl-C while watching: the job keeps running
)";

}  // namespace

const std::vector<CommandInfo>& Commands() {
  static const auto* commands = new std::vector<CommandInfo>{
      {"submit", "JOB.json", 1, 1, "a job spec file (or - for standard input)", true,
       "queue a job (the coordinator validates the spec and lists every problem); JOB.json may "
       "be - (standard input); --watch then follows it like `watch`"},
      {"resubmit", "JOB", 1, 1, kJobArgument, true,
       "submit JOB's spec again; --resume continues from its last sealed checkpoint step, "
       "--steps trains to step N instead"},
      {"plan", "JOB.json", 1, 1, "a job spec file (or - for standard input)", false,
       "without a coordinator: validate the spec, place it on N hypothetical workers (default "
       "dp*pp*tp) over H hosts, simulate one step of its pipeline schedule (timeline, bubble, "
       "memory)"},
      {"status", "JOB...", 1, kManyArgs, kJobArgument, true,
       "state, times, progress, checkpoints, output, placement and history of one or more jobs"},
      {"list", "", 0, 0, "", true,
       "jobs, newest first; only those in the states given, of the owner given"},
      {"watch", "JOB", 1, 1, kJobArgument, true,
       "a live progress line until the job ends, then a summary; --json: one compact object per "
       "step, state change and event; Ctrl-C stops watching, not the job (exit 130)"},
      {"cancel", "JOB...", 1, kManyArgs, kJobArgument, true,
       "stop queued or running jobs (one that already ended: a note)"},
      {"delete", "JOB...", 1, kManyArgs, kJobArgument, true,
       "admin: forget ended jobs (state, history, metrics, log, checkpoint list); --files also "
       "removes each one's directory (checkpoints, final weights) through a worker on its host. "
       "Refused for a job not ended, or whose checkpoints a job not ended resumes from"},
      {"logs", "JOB", 1, 1, kJobArgument, true,
       "the job's events and its ranks' warnings and errors"},
      {"checkpoints", "JOB", 1, 1, kJobArgument, true,
       "where the job's checkpoints are and its sealed steps"},
      {"diagnose", "JOB", 1, 1, kJobArgument, true,
       "what every rank of a running job is doing now (its flight recorder) and, when the job is "
       "stuck, which rank the others wait on (the root) and why; --json: the whole diagnosis"},
      {"trace", "JOB", 1, 1, kJobArgument, true,
       "one step of a running job on every rank as a Chrome / Perfetto trace (-o FILE; open it "
       "in ui.perfetto.dev or chrome://tracing): F / B / W, sends, receives, collectives, "
       "arrows from each send to its receive, on the coordinator's clock (docs/TRACING.md)"},
      {"rebalance", "JOB", 1, 1, kJobArgument, true,
       "admin: re-cut a running pipeline job's layers from its stages' compute in its latest "
       "straggler window, when a cut is predicted 10% faster; it restarts on it at its next "
       "sealed checkpoint (the straggler policy rebalance does this by itself)"},
      {"checkpoint", "JOB", 1, 1, kJobArgument, true,
       "ask a running job for a checkpoint now: its ranks take it at their next step, whatever "
       "its interval; waits until it is sealed (before maintenance, or to `dtrain sample` the "
       "model as it is); a user on their own jobs"},
      {"priority", "JOB N", 2, 2, "a job and its new priority (-100..100)", true,
       "set a queued or running job's priority: its place in the queue follows at once (and, "
       "where the coordinator preempts, whom it may preempt); a user on their own jobs up to "
       "the coordinator's --max_user_priority"},
      {"workers", "[drain|undrain WORKER_ID]", 0, 2, "drain ID or undrain ID", true,
       "registered workers, their jobs and heartbeats; admin: `workers drain ID` takes worker "
       "ID out of service for maintenance (no new jobs; its job moves off it at its next sealed "
       "checkpoint, or at once with --now, a restart not counted against max_restarts; then it "
       "is DRAINED and can be stopped), `workers undrain ID` returns it (so does its restart)"},
      {"export", "CHECKPOINT OUT.safetensors", 2, 2, "a checkpoint directory and an output file",
       false,
       "without a coordinator: assemble a multi-worker job's sharded checkpoint (its directory, "
       "using `latest`, or one step_N directory) into one GPT-2 safetensors file"},
      {"certs", "init|issue DIR [NAME]", 2, 3, "init DIR, or issue DIR NAME", false,
       "without a coordinator: `certs init DIR` makes the cluster CA (DIR/ca.pem, ca.key) and "
       "DIR/NAME.pem + NAME.key for coordinator, worker, admin and viewer (CN = name, OU = "
       "role; keys 0600; an existing CA is never replaced); `certs issue DIR NAME --role=ROLE` "
       "adds one signed by DIR's CA (e.g. one per worker or user)"},
      {"export-metrics", "JOB", 1, 1, kJobArgument, true,
       "a job's scalars (loss, lr, grad_norm, tokens/s per step; a running one's so far) as CSV "
       "or a TensorBoard event file (-o FILE; a running job's reporting rank also writes "
       "events.out.tfevents.* into its directory as it trains)"},
      {"sample", "CHECKPOINT|JOB", 1, 1,
       "a checkpoint (safetensors file or checkpoint directory) or a job", true,
       "text from a model: a JOB's newest sealed checkpoint, drawn by a worker of the host that "
       "holds it (wherever this runs); a CHECKPOINT path that exists, on this machine's --device "
       "(dtrain-sample, beside dtrain or on PATH; no coordinator); --temperature=0 is greedy"},
      {"data", "prepare IN.txt OUT.bin", 3, 3, "prepare, a text file and an output file", false,
       "without a coordinator: `data prepare IN.txt OUT.bin` tokenizes a UTF-8 text file "
       "(--tokenizer=gpt2: GPT-2's byte-pair encoding, vocab 50257; byte: vocab 256) into an "
       "llm.c token file, a job's dataset"},
      {"console", "", 0, 0, "", true,
       "a web console of the cluster and its jobs on a local address (--listen), acting with "
       "this certificate and its role, like `kubectl proxy`: jobs, loss and tokens/s curves, "
       "placement, workers, live, text sampled from a job's newest checkpoint (by a worker of its "
       "host); a non-loopback --listen needs --listen_public and a token"},
      {"version", "", 0, 0, "", false, "the version of dtrain and the commit it was built from"},
      {"help", "[COMMAND]", 0, 1, "", false, "this text, or one command's arguments and flags"},
  };
  return *commands;
}

const std::vector<FlagInfo>& Flags() {
  using I = Invocation;
  static const auto* flags = new std::vector<FlagInfo>{
      // Flags of every command.
      {"coordinator",
       &I::coordinator,
       "HOST:PORT",
       "",
       "$DTRAIN_COORDINATOR, else 127.0.0.1:7070",
       FlagBound::kAny,
       {},
       "the coordinator"},
      {"json",
       &I::json,
       "",
       "false",
       "",
       FlagBound::kAny,
       {},
       "machine-readable output, one JSON object per line (client/README.md)"},
      {"timeout",
       &I::timeout,
       "DURATION",
       "10s",
       "",
       FlagBound::kPositive,
       {},
       "deadline of every call; also how long a watch stream may take to answer"},
      {"reconnect_for",
       &I::reconnect_for,
       "DURATION",
       "60s",
       "",
       FlagBound::kNotNegative,
       {},
       "watch: how long to keep reconnecting when the coordinator goes away"},
      {"tls_ca",
       &I::tls_ca,
       "FILE",
       "",
       "$DTRAIN_TLS_CA",
       FlagBound::kAny,
       {},
       "the cluster CA (PEM) that signed the coordinator's certificate"},
      {"tls_cert",
       &I::tls_cert,
       "FILE",
       "",
       "$DTRAIN_TLS_CERT",
       FlagBound::kAny,
       {},
       "this client's certificate (PEM; its OU is the role: admin, user or viewer; its CN the name "
       "its jobs record)"},
      {"tls_key",
       &I::tls_key,
       "FILE",
       "",
       "$DTRAIN_TLS_KEY",
       FlagBound::kAny,
       {},
       "its private key (PEM)"},
      {"insecure",
       &I::insecure,
       "",
       "false",
       "$DTRAIN_INSECURE=1",
       FlagBound::kAny,
       {},
       "plaintext, no certificate: only for a coordinator started with --insecure"},
      {"help",
       &I::help,
       "",
       "false",
       "",
       FlagBound::kAny,
       {},
       "this text; with a command, that command's help (also -h)"},
      {"version",
       &I::version,
       "",
       "false",
       "",
       FlagBound::kAny,
       {},
       "print the version and the commit dtrain was built from"},
      // Flags of some commands.
      {"watch",
       &I::watch,
       "",
       "false",
       "",
       FlagBound::kAny,
       {"submit", "resubmit"},
       "then follow the job to its end, like `watch`"},
      {"allow_waiting",
       &I::allow_waiting,
       "",
       "false",
       "",
       FlagBound::kAny,
       {"submit", "resubmit"},
       "queue a job no registered worker can hold (its memory), for workers that may join"},
      {"quiet", &I::quiet, "", "false", "", FlagBound::kAny, kWatching,
       "state changes and the summary only"},
      {"every", &I::every, "N", "1", "", FlagBound::kAtLeastOne, kWatching,
       "a step line every N steps (and the last)"},
      {"state",
       &I::states,
       "S1,S2",
       "",
       "every state",
       FlagBound::kNotEmpty,
       {"list"},
       "only jobs in these states: QUEUED, PLACING, RUNNING, RECOVERING, SUCCEEDED, FAILED, "
       "CANCELLED (any case)"},
      {"limit",
       &I::limit,
       "N",
       "0",
       "0: the coordinator's, which is 100",
       FlagBound::kNotNegative,
       {"list"},
       "at most N jobs (a page; the coordinator sends at most 1000)"},
      {"page",
       &I::page,
       "TOKEN",
       "",
       "the newest",
       FlagBound::kAny,
       {"list"},
       "the page of older jobs a previous list ended with (it prints the token)"},
      {"owner",
       &I::owner,
       "NAME",
       "",
       "everyone's",
       FlagBound::kNotEmpty,
       {"list"},
       "only the jobs submitted with the certificate named NAME (its CN: `status` shows a job's "
       "owner)"},
      {"mine",
       &I::mine,
       "",
       "false",
       "",
       FlagBound::kAny,
       {"list"},
       "only the jobs submitted with this command's certificate"},
      {"reason",
       &I::reason,
       "TEXT",
       "",
       "'cancelled by NAME' (this certificate's name)",
       FlagBound::kAny,
       {"cancel"},
       "why, recorded in the jobs' history"},
      {"resume",
       &I::resume,
       "",
       "false",
       "",
       FlagBound::kAny,
       {"resubmit"},
       "continue from the job's last sealed checkpoint step"},
      {"steps",
       &I::steps,
       "N",
       "0",
       "0: the job's own",
       FlagBound::kNotNegative,
       {"resubmit"},
       "train to step N instead"},
      {"rank",
       &I::rank,
       "N",
       "",
       "every rank and the coordinator",
       FlagBound::kNotNegative,
       {"logs"},
       "only this rank's lines"},
      {"step",
       &I::step,
       "N",
       "",
       "the newest step complete on every rank",
       FlagBound::kNotNegative,
       {"trace"},
       "trace this step (one still in every rank's flight "
       "recorder: the error names those that are)"},
      {"output",
       &I::output,
       "FILE",
       "-",
       "standard output",
       FlagBound::kNotEmpty,
       {"trace", "export-metrics"},
       "write the trace or the metrics to FILE (also -o FILE)"},
      {"listen",
       &I::listen,
       "HOST:PORT",
       "127.0.0.1:8080",
       "",
       FlagBound::kNotEmpty,
       {"console"},
       "where the console serves its pages (loopback unless --listen_public)"},
      {"listen_public",
       &I::listen_public,
       "",
       "false",
       "",
       FlagBound::kAny,
       {"console"},
       "allow a --listen that is not loopback; every request then needs the token printed at "
       "start"},
      {"format",
       &I::format,
       "F",
       "csv",
       "",
       FlagBound::kNotEmpty,
       {"export-metrics"},
       "csv or tfevents (TensorBoard)"},
      {"follow",
       &I::follow,
       "",
       "false",
       "",
       FlagBound::kAny,
       {"logs"},
       "keep printing new lines until the job ends"},
      {"files",
       &I::files,
       "",
       "false",
       "",
       FlagBound::kAny,
       {"delete"},
       "also remove the job's directory on its host (checkpoints, model.safetensors); without "
       "it the files stay"},
      {"now",
       &I::drain_now,
       "",
       "false",
       "",
       FlagBound::kAny,
       {"workers"},
       "workers drain: move the worker's job off it at once (from its latest sealed "
       "checkpoint)"},
      {"forget",
       &I::forget,
       "WORKER_ID",
       "",
       "",
       FlagBound::kNotEmpty,
       {"workers"},
       "remove this LOST worker from the registry"},
      {"host",
       &I::cert_hosts,
       "NAME,IP",
       "",
       "",
       FlagBound::kAny,
       {"certs"},
       "extra DNS names and IPs of the coordinator (and worker) certificates, comma-separated"},
      {"days",
       &I::days,
       "N",
       "365",
       "",
       FlagBound::kAtLeastOne,
       {"certs"},
       "the certificates are valid for N days from now"},
      {"role",
       &I::role,
       "ROLE",
       "",
       "",
       FlagBound::kNotEmpty,
       {"certs"},
       "issue: coordinator, worker, admin or viewer"},
      {"not_after",
       &I::not_after,
       "YYYY-MM-DD",
       "",
       "",
       FlagBound::kNotEmpty,
       {"certs"},
       "instead of --days: valid until this date (a past date makes an expired certificate, "
       "for tests)"},
      {"tokenizer",
       &I::tokenizer,
       "NAME",
       "gpt2",
       "",
       FlagBound::kNotEmpty,
       {"data"},
       "gpt2 (GPT-2's byte-pair encoding) or byte"},
      {"tokenizer_dir",
       &I::tokenizer_dir,
       "DIR",
       kDefaultGpt2TokenizerDir,
       "",
       FlagBound::kNotEmpty,
       {"data", "sample"},
       "GPT-2's encoder.json and vocab.bpe (tools/setup.sh fetches them there; sample: of a "
       "CHECKPOINT path)"},
      {"prompt", &I::prompt, "TEXT", "", "", FlagBound::kAny, {"sample"}, "the text to continue"},
      {"tokens",
       &I::sample_tokens,
       "N",
       "64",
       "",
       FlagBound::kAtLeastOne,
       {"sample"},
       "new tokens (at most the model's context)"},
      {"temperature",
       &I::temperature,
       "T",
       "1",
       "",
       FlagBound::kNotEmpty,
       {"sample"},
       "softmax temperature; 0: greedy"},
      {"top_k",
       &I::top_k,
       "K",
       "0",
       "0: every token",
       FlagBound::kNotNegative,
       {"sample"},
       "draw among the K most likely tokens"},
      {"seed", &I::seed, "S", "1337", "", FlagBound::kNotNegative, {"sample"}, "seed of the draws"},
      {"device",
       &I::device,
       "DEVICE",
       "auto",
       "",
       FlagBound::kNotEmpty,
       {"sample"},
       "cpu, cuda, cuda:N or auto (of a CHECKPOINT path; a JOB's worker draws on its CPU)"},
      {"n_head",
       &I::n_head,
       "N",
       "0",
       "0: n_embd/64",
       FlagBound::kNotNegative,
       {"sample"},
       "heads of a safetensors CHECKPOINT (a checkpoint directory's manifest says)"},
      {"workers",
       &I::workers,
       "N",
       "0",
       "0: dp*pp*tp",
       FlagBound::kNotNegative,
       {"plan"},
       "hypothetical workers w0..wN-1 to place on"},
      {"hosts",
       &I::hosts,
       "H",
       "1",
       "",
       FlagBound::kAtLeastOne,
       {"plan"},
       "host labels h0..hH-1, the workers spread over them in blocks of ceil(N/H)"},
  };
  return *flags;
}

const CommandInfo* FindCommand(const std::string& name) {
  for (const CommandInfo& command : Commands()) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

absl::StatusOr<Invocation> ParseArguments(const std::vector<std::string>& args,
                                          const char* env_coordinator) {
  Invocation inv;
  for (const FlagInfo& flag : Flags()) {
    // A default that does not parse is a bug in the table, not a usage error.
    const absl::Status status = SetValue(flag, flag.default_value, inv);
    if (!status.ok()) return absl::InternalError(absl::StrCat("flag table: ", status.message()));
  }
  std::vector<std::string> positional;
  std::set<const FlagInfo*> set_flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    int64_t number = 0;  // a negative number ("-5": dtrain priority JOB -5) is no flag
    if (arg.size() < 2 || arg[0] != '-' || absl::SimpleAtoi(arg, &number)) {
      positional.push_back(arg);
      continue;
    }
    absl::string_view body = arg;
    if (!absl::ConsumePrefix(&body, "--")) absl::ConsumePrefix(&body, "-");
    const size_t eq = body.find('=');
    std::string name(body.substr(0, eq));
    std::optional<std::string> value;
    if (eq != absl::string_view::npos) value = std::string(body.substr(eq + 1));
    if (name == "h") name = "help";
    if (name == "o") name = "output";
    const FlagInfo* flag = FindFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") && !value.has_value()) {
      flag = FindFlag(name.substr(2));
      if (flag != nullptr && !IsBool(*flag)) flag = nullptr;
      if (flag != nullptr) value = "false";
    }
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
    if (!value.has_value()) {
      if (IsBool(*flag)) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    RETURN_IF_ERROR(SetValue(*flag, *value, inv));
    set_flags.insert(flag);
  }

  if (!positional.empty()) {
    inv.command = positional[0];
    inv.args.assign(positional.begin() + 1, positional.end());
  } else if (inv.help) {
    inv.command = "help";
  } else if (inv.version) {
    inv.command = "version";
  } else {
    return absl::InvalidArgumentError("no command given");
  }
  const CommandInfo* command = FindCommand(inv.command);
  if (command == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown command '", inv.command, "'"));
  }
  // `dtrain watch --help` is `dtrain help watch`, whatever else the line lacks.
  if (inv.help && inv.command != "help") {
    inv.args = {inv.command};
    inv.command = "help";
    command = FindCommand(inv.command);
  }
  inv.help = inv.command == "help";
  inv.version = inv.version || inv.command == "version";
  if (inv.help && inv.args.size() == 1 && FindCommand(inv.args[0]) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command '", inv.args[0], "' (dtrain help lists them)"));
  }
  const int given = static_cast<int>(inv.args.size());
  if (given < command->min_args) {
    return absl::InvalidArgumentError(absl::StrCat("'", inv.command, "' needs ", command->missing));
  }
  if (given > command->max_args) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unexpected argument '", inv.args[command->max_args], "' for '", inv.command, "'"));
  }
  if (inv.help || inv.version) return inv;
  for (const FlagInfo* flag : set_flags) {
    if (!TakesFlag(*command, *flag)) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", flag->name, " applies to '",
                                                     absl::StrJoin(flag->commands, "', '"),
                                                     "' only, not '", inv.command, "'"));
    }
  }
  for (const FlagInfo* flag : set_flags) RETURN_IF_ERROR(CheckBound(*flag, inv));

  if (inv.coordinator.empty() && env_coordinator != nullptr) inv.coordinator = env_coordinator;
  if (inv.coordinator.empty()) inv.coordinator = kDefaultCoordinator;
  return inv;
}

TlsFiles TlsFilesOf(const Invocation& inv, char* (*getenv)(const char*)) {
  auto flag_or_env = [&](const std::string& flag, const char* env) {
    if (!flag.empty()) return flag;
    const char* value = getenv(env);
    return std::string(value != nullptr ? value : "");
  };
  TlsFiles tls;
  tls.insecure = inv.insecure;
  const bool tls_flags = !inv.tls_ca.empty() || !inv.tls_cert.empty() || !inv.tls_key.empty();
  if (!tls.insecure && !tls_flags) {
    const char* insecure = getenv(kInsecureEnv);
    tls.insecure = insecure != nullptr && std::string(insecure) == "1";
  }
  if (inv.insecure) {  // the flag wins over TLS files in the environment, not over flags
    tls.ca = inv.tls_ca;
    tls.cert = inv.tls_cert;
    tls.key = inv.tls_key;
    return tls;
  }
  tls.ca = flag_or_env(inv.tls_ca, kTlsCaEnv);
  tls.cert = flag_or_env(inv.tls_cert, kTlsCertEnv);
  tls.key = flag_or_env(inv.tls_key, kTlsKeyEnv);
  // DTRAIN_INSECURE=1 beside DTRAIN_TLS_* files is both: ValidateTlsFiles says so.
  return tls;
}

bool NeedsCoordinator(const Invocation& invocation) {
  if (invocation.help || invocation.version) return false;
  // `sample` of a checkpoint path that exists here runs without the coordinator; of a job, not.
  if (invocation.command == "sample" && !invocation.args.empty() &&
      access(invocation.args[0].c_str(), F_OK) == 0) {
    return false;
  }
  const CommandInfo* command = FindCommand(invocation.command);
  return command == nullptr || command->needs_coordinator;
}

std::string Usage() {
  std::string usage = R"(dtrain: the command line of the dtrain training service.

usage: dtrain [flags] COMMAND [ARGS]
       dtrain help COMMAND   (one command's arguments and flags)

JOB is a job id (job-000012), its number (12) or a job name that only one job has.

commands:
)";
  for (const CommandInfo& command : Commands()) {
    usage += HelpRow(CommandSynopsis(command), command.help);
  }
  absl::StrAppend(&usage, "\nflags of every command (anywhere on the line):\n", GlobalFlagRows(),
                  "\nflags of some commands:\n");
  for (const FlagInfo& flag : Flags()) {
    if (!flag.commands.empty()) usage += FlagRow(flag, /*name_commands=*/true);
  }
  absl::StrAppend(&usage, "\n", kExitCodes);
  return usage;
}

std::string CommandUsage(const std::string& name) {
  const CommandInfo* command = FindCommand(name);
  if (command == nullptr) return Usage();
  std::string usage = absl::StrCat("usage: dtrain [flags] ", CommandSynopsis(*command), "\n\n",
                                   Wrap(command->help, 0, 0), "\n");
  std::string own;
  for (const FlagInfo& flag : Flags()) {
    if (!flag.commands.empty() && TakesFlag(*command, flag)) own += FlagRow(flag, false);
  }
  if (!own.empty()) absl::StrAppend(&usage, "\nflags of ", command->name, ":\n", own);
  absl::StrAppend(&usage, "\nflags of every command:\n", GlobalFlagRows(),
                  "\n'dtrain help' lists every command and the exit codes.\n");
  return usage;
}

}  // namespace client
}  // namespace dtrain
