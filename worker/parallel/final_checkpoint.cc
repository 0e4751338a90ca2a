#include "worker/parallel/final_checkpoint.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace dtrain::parallel {
namespace {

// Sleeps `d` in slices, ending early with peers_ok's error.
absl::Status SleepWatching(absl::Duration d, const std::function<absl::Status()>& peers_ok) {
  const absl::Time until = absl::Now() + d;
  while (true) {
    if (peers_ok) RETURN_IF_ERROR(peers_ok());
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::OkStatus();
    absl::SleepFor(std::min(left, absl::Milliseconds(200)));
  }
}

}  // namespace

absl::Status AwaitFinalCheckpoint(const FinalCheckpointRetry& retry,
                                  const FinalCheckpointHooks& hooks, bool rank0,
                                  const std::string& what, const std::string& dir,
                                  std::string* skipped) {
  const absl::Time started = absl::Now();
  absl::Time logged = absl::InfinitePast();
  absl::Duration delay = retry.first_delay;
  // What rank 0 last told space_wait ("" before the first wait; every way out ends it).
  std::string reported_why;
  absl::Cleanup end_report = [&] {
    if (reported_why.empty() || !hooks.space_wait) return;
    hooks.space_wait({dir, reported_why, started + retry.wait, /*ended=*/true});
  };
  for (int attempt = 1;; ++attempt) {
    // Rank 0's verdict, the same on every rank: 0 sealed, 1 try again, 2 give up.
    float verdict = 0;
    if (rank0 && !skipped->empty()) verdict = absl::Now() - started < retry.wait ? 1 : 2;
    ASSIGN_OR_RETURN(const float agreed, hooks.agree(verdict));
    if (agreed == 0) {
      if (rank0 && attempt > 1 && hooks.note) {
        hooks.note(
            absl::StrCat(what, " was written after ",
                         absl::FormatDuration(absl::Trunc(absl::Now() - started, absl::Seconds(1))),
                         " waiting for space"));
      }
      return absl::OkStatus();
    }
    if (agreed >= 2) {
      if (rank0) {
        absl::StrAppend(skipped, "; waited ", absl::FormatDuration(retry.wait), " for space");
      }
      return absl::OkStatus();
    }
    const bool log_now = rank0 && absl::Now() - logged >= retry.log_every;
    if (log_now) logged = absl::Now();
    if (log_now && hooks.warning) {
      hooks.warning(absl::StrCat(
          what, " does not fit (", *skipped,
          hooks.alone
              ? "): it is written again until it fits, for up to "
              : "): every rank keeps its state and writes it again until it fits, for up to ",
          absl::FormatDuration(retry.wait), " (next try in ", absl::FormatDuration(delay),
          "); free space in ", dir, " or cancel the job"));
    }
    // Again with each log line: a coordinator that restarted meanwhile learns of it.
    if (rank0 && hooks.space_wait && (*skipped != reported_why || log_now)) {
      reported_why = *skipped;
      hooks.space_wait({dir, reported_why, started + retry.wait, /*ended=*/false});
    }
    if (hooks.waiting) hooks.waiting(true);
    const absl::Status slept = SleepWatching(delay, hooks.peers_ok);
    if (hooks.waiting) hooks.waiting(false);
    RETURN_IF_ERROR(slept);
    delay = std::min(delay * 2, retry.max_delay);
    ASSIGN_OR_RETURN(std::string again, hooks.write_again());
    if (rank0) *skipped = std::move(again);
  }
}

absl::Status WriteWaitingForSpace(const FinalCheckpointRetry& retry, FinalCheckpointHooks hooks,
                                  const std::string& path, const std::string& what,
                                  const std::function<absl::StatusOr<std::string>()>& write,
                                  const std::function<bool()>& stopped) {
  ASSIGN_OR_RETURN(std::string full, write());
  if (full.empty()) return absl::OkStatus();
  hooks.agree = [](float verdict) -> absl::StatusOr<float> { return verdict; };  // alone
  hooks.peers_ok = [&stopped] {
    return stopped && stopped() ? absl::CancelledError("stopped") : absl::OkStatus();
  };
  hooks.write_again = write;
  hooks.alone = true;
  if (hooks.space_wait) {
    hooks.space_wait = [report = std::move(hooks.space_wait)](SpaceWait w) {
      w.weights_file = true;
      report(w);
    };
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  RETURN_IF_ERROR(AwaitFinalCheckpoint(retry, hooks, /*rank0=*/true, what, dir, &full));
  if (!full.empty()) return absl::ResourceExhaustedError(full);
  return absl::OkStatus();
}

}  // namespace dtrain::parallel
