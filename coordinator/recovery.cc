#include "coordinator/recovery.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "plan/ranks.h"
#include "plan/spec_enums.h"

namespace dtrain::coordinator {

bool DeviceFits(absl::string_view device, absl::string_view kind) {
  return plan::DeviceFits(plan::ParseDevice(device).value_or(DEVICE_AUTO),
                          plan::ParseDevice(kind).value_or(JOB_DEVICE_UNSPECIFIED));
}

bool AnyDevice(absl::string_view device) {
  return DeviceFits(device, "cpu") && DeviceFits(device, "cuda");
}

bool SameWorkers(absl::string_view a, absl::string_view b) {
  for (absl::string_view kind : {"cpu", "cuda"}) {
    if (DeviceFits(a, kind) && DeviceFits(b, kind)) return true;
  }
  return false;
}

absl::string_view RecoveryKind(const Recovery& r) {
  if (r.finishing()) return "finishing";
  if (r.maintenance()) return "maintenance";
  if (!r.preempted_by().empty()) return "preempted";
  if (r.grow()) return "grow";
  if (!r.replaced_worker().empty()) return "straggler_replaced";
  if (!r.rebalance_to().empty()) return "rebalance";
  return "failure";
}

bool IsPlannedRestart(const Recovery& r) { return RecoveryKind(r) != "failure"; }

int FailureCount(absl::Span<const Recovery> recoveries) {
  int failures = 0;
  for (const Recovery& r : recoveries) failures += IsPlannedRestart(r) ? 0 : 1;
  return failures;
}

absl::flat_hash_set<std::string> WorkersFailedTwice(absl::Span<const Recovery> recoveries) {
  absl::flat_hash_map<std::string, int> failures;
  absl::flat_hash_set<std::string> twice;
  for (const Recovery& r : recoveries) {
    if (IsPlannedRestart(r)) continue;  // a worker stopped for maintenance did not fail
    if (!r.failed_worker().empty() && ++failures[r.failed_worker()] >= 2) {
      twice.insert(r.failed_worker());
    }
  }
  return twice;
}

absl::flat_hash_set<std::string> NotSparesForReplace(absl::Span<const Recovery> recoveries) {
  absl::flat_hash_set<std::string> excluded = WorkersFailedTwice(recoveries);
  for (const Recovery& r : recoveries) {
    if (!r.replaced_worker().empty()) excluded.insert(r.replaced_worker());
  }
  return excluded;
}

JobSpec CurrentRunSpec(const JobSpec& spec, absl::Span<const Recovery> recoveries) {
  JobSpec current = spec;
  *current.mutable_parallel() = plan::JobCurrentLayout(spec, recoveries).layout;
  return current;
}

std::string PhaseSummary(const Recovery& r) {
  auto s = [](int64_t ms) { return absl::StrFormat("%.1fs", ms / 1000.0); };
  const int64_t total =
      r.detect_ms() + r.stop_ms() + r.place_ms() + r.load_ms() + r.first_step_ms();
  return absl::StrCat("detect ", s(r.detect_ms()), ", stop ", s(r.stop_ms()), ", place ",
                      s(r.place_ms()), ", load ", s(r.load_ms()), ", first step ",
                      s(r.first_step_ms()), " (", s(total), " in all)");
}

std::string ReasonNamingEveryFailure(const std::string& reason,
                                     absl::Span<const Recovery> recoveries) {
  std::string text = reason;
  const int failures = FailureCount(recoveries);
  int n = 0;
  for (const Recovery& r : recoveries) {
    if (IsPlannedRestart(r)) continue;
    // Each earlier cause on one line: its own detail lines indented under it.
    absl::StrAppend(&text, "\n  earlier failure ", ++n, " of ", failures,
                    " (recovered): ", absl::StrReplaceAll(r.cause(), {{"\n", "\n  "}}));
  }
  return text;
}

}  // namespace dtrain::coordinator
