#include "worker/model/run_claim.h"

#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace dtrain::model {
namespace {

// A claim is one short line; anything larger is not one.
constexpr int64_t kMaxClaimBytes = 4096;

// DIR/run read as a claim: nothing when the file is missing or does not read as one.
absl::StatusOr<std::optional<RunClaim>> ReadClaim(const HeldDirectory& dir) {
  if (dir.KindOf(kRunClaimFileName) == HeldDirectory::Kind::kMissing) return std::nullopt;
  absl::StatusOr<std::string> text = dir.ReadFile(kRunClaimFileName, kMaxClaimBytes);
  if (absl::IsInvalidArgument(text.status())) return std::nullopt;  // oversized, not a file
  if (!text.ok()) return text.status();
  const std::vector<absl::string_view> words =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(*text), ' ');
  RunClaim claim;
  if (words.size() != 4 || words[0] != "attempt" || words[2] != "run" ||
      !absl::SimpleAtoi(words[1], &claim.attempt) || words[3].empty()) {
    return std::nullopt;
  }
  claim.token = std::string(words[3]);
  return claim;
}

std::string Describe(const RunClaim& run) {
  return absl::StrCat("attempt ", run.attempt, ", run ", run.token);
}

}  // namespace

std::string RunClaimText(const RunClaim& run) {
  return absl::StrCat("attempt ", run.attempt, " run ", run.token);
}

absl::Status ClaimRun(const HeldDirectory& dir, const RunClaim& run) {
  ASSIGN_OR_RETURN(const std::optional<RunClaim> held, ReadClaim(dir));
  if (held.has_value() && held->attempt > run.attempt) {
    return absl::AbortedError(absl::StrCat(
        "job directory ", dir.path(), " is written by a later run (", Describe(*held),
        ") than this one (", Describe(run), "): this run was replaced and writes nothing"));
  }
  return dir.WriteFileAtomically(kRunClaimFileName, RunClaimText(run) + "\n");
}

absl::Status CheckRunClaim(const HeldDirectory& dir, const RunClaim& run) {
  ASSIGN_OR_RETURN(const std::optional<RunClaim> held, ReadClaim(dir));
  if (held.has_value() && held->attempt == run.attempt && held->token == run.token) {
    return absl::OkStatus();
  }
  return absl::AbortedError(absl::StrCat(
      "job directory ", dir.path(), " is written by ",
      held.has_value()
          ? absl::StrCat("another run (", Describe(*held), ")")
          : absl::StrCat("no run (", dir.PathOf(kRunClaimFileName), " is missing or unreadable)"),
      ", not by this one (", Describe(run), "): this run was replaced and writes nothing more"));
}

}  // namespace dtrain::model
