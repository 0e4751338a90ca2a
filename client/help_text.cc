// `dtrain help` and `dtrain help COMMAND`: the usage text made from the command table
// (command_table.cc), wrapped to 96 columns.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/arguments.h"
#include "client/arguments_internal.h"

namespace dtrain {
namespace client {
namespace {

// Help layout: descriptions start at this column and lines end before kWidth.
constexpr size_t kHelpColumn = 33;
constexpr size_t kWidth = 96;

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
