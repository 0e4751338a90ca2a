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
#include "client/arguments_internal.h"
#include "common/status_macros.h"

namespace dtrain {
namespace client {
namespace {

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

}  // namespace

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

}  // namespace client
}  // namespace dtrain
