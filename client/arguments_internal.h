// What the three parts of the CLI's argument handling share, not the CLI's interface:
// arguments.cc (parsing), command_table.cc (the commands and flags) and help_text.cc (usage).
#ifndef DTRAIN_CLIENT_ARGUMENTS_INTERNAL_H_
#define DTRAIN_CLIENT_ARGUMENTS_INTERNAL_H_

#include "absl/strings/string_view.h"
#include "client/arguments.h"

namespace dtrain {
namespace client {

// A switch (--watch), not a flag with a value.
bool IsBool(const FlagInfo& flag);
// The flag named `name` (without "--"); nullptr when there is none.
const FlagInfo* FindFlag(absl::string_view name);
// Whether `command` takes `flag` (a flag of every command, or one of its own).
bool TakesFlag(const CommandInfo& command, const FlagInfo& flag);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_ARGUMENTS_INTERNAL_H_
