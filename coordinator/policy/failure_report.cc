#include "coordinator/policy/failure_report.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "plan/ranks.h"

namespace dtrain::coordinator {
namespace {

// "worker w4 (dp0 pp1 tp1)", or "worker w4" when it holds no rank of the placement.
std::string Who(const Placement& placement, const std::string& worker_id) {
  for (const RankAssignment& r : placement.ranks()) {
    if (r.worker_id() == worker_id) {
      return absl::StrCat("worker ", worker_id, " (", plan::RankLabel(r), ")");
    }
  }
  return absl::StrCat("worker ", worker_id);
}

std::string Describe(const Placement& placement, const RankFailure& f) {
  const std::string who = Who(placement, f.worker_id);
  switch (f.cause) {
    case RankFailure::kStopped:
      return absl::StrCat(who, " stopped: ", f.error);
    case RankFailure::kLost:
      return absl::StrCat(who, " lost: ", f.error);
    case RankFailure::kLocal:
    case RankFailure::kPeer:
      return absl::StrCat(who, " failed: ", f.error.empty() ? "no error message" : f.error);
  }
  return who;
}

// "the link between worker w1 (..) and worker w2 (..) failed: ..." when every failure is a
// peer's and every blame is returned (A blames B and B blames A: both alive, both reporting,
// each lost the other); "" otherwise.
std::string BrokenLinks(const Placement& placement, const std::vector<RankFailure>& failures) {
  std::map<std::string, std::set<std::string>> blames;  // accuser -> suspects
  for (const RankFailure& f : failures) {
    if (f.cause != RankFailure::kPeer || f.suspects.empty()) return "";
    blames[f.worker_id].insert(f.suspects.begin(), f.suspects.end());
  }
  std::vector<std::string> links;
  for (const auto& [accuser, suspects] : blames) {
    for (const std::string& s : suspects) {
      auto back = blames.find(s);
      if (back == blames.end() || back->second.count(accuser) == 0) return "";
      if (accuser < s) {
        links.push_back(absl::StrCat(Who(placement, accuser), " and ", Who(placement, s)));
      }
    }
  }
  return absl::StrCat(links.size() == 1 ? "the link between " : "the links between ",
                      absl::StrJoin(links, "; "),
                      " failed: each side lost its connection to the other and reported it, "
                      "so neither worker is the cause (a network partition?)");
}

}  // namespace

RankFailure::Cause CauseOf(FailureKind kind) {
  switch (kind) {
    case FAILURE_STOPPED:
      return RankFailure::kStopped;
    case FAILURE_PEER:
      return RankFailure::kPeer;
    default:
      return RankFailure::kLocal;
  }
}

bool RestartCanCure(const RankFailure& failure) {
  if (failure.cause != RankFailure::kLocal) return true;
  switch (static_cast<absl::StatusCode>(failure.error_code)) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

bool IsCommTimeout(const RankFailure& failure) {
  return failure.cause == RankFailure::kPeer &&
         failure.error_code == static_cast<int>(absl::StatusCode::kDeadlineExceeded);
}

std::string RootCauseReason(const Placement& placement, const std::vector<RankFailure>& failures,
                            const absl::flat_hash_map<std::string, absl::Duration>& heartbeat_age) {
  return FindRootCause(placement, failures, heartbeat_age).reason;
}

RootCause FindRootCause(const Placement& placement, const std::vector<RankFailure>& failures,
                        const absl::flat_hash_map<std::string, absl::Duration>& heartbeat_age) {
  RootCause cause;
  if (failures.empty()) {
    cause.reason = "failed (no report)";
    return cause;
  }
  // 1-3: the first failure of the lowest cause, when that cause is not "a peer".
  const auto first_root = std::min_element(
      failures.begin(), failures.end(),
      [](const RankFailure& a, const RankFailure& b) { return a.cause < b.cause; });
  std::string root;
  const RankFailure* root_failure = nullptr;
  if (first_root->cause != RankFailure::kPeer) {
    root = Describe(placement, *first_root);
    root_failure = &*first_root;
    cause.worker_id = first_root->worker_id;
    cause.curable = RestartCanCure(*first_root);
  } else {
    cause.curable = true;  // a peer's failure: the one blamed died, hung or broke its stream
    // 4: the most blamed worker among those that reported nothing themselves.
    absl::flat_hash_set<std::string> reported;
    for (const RankFailure& f : failures) reported.insert(f.worker_id);
    std::map<std::string, int> votes;  // ordered: ties go to the smaller id, deterministically
    std::map<std::string, std::vector<std::string>> blamed_by;
    std::map<std::string, int> timed_out;  // blamers whose receive from it passed its deadline
    for (const RankFailure& f : failures) {
      for (const std::string& s : f.suspects) {
        if (reported.contains(s)) continue;
        ++votes[s];
        blamed_by[s].push_back(f.worker_id);
        if (IsCommTimeout(f)) ++timed_out[s];
      }
    }
    const auto best =
        std::max_element(votes.begin(), votes.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    if (best != votes.end()) {
      const std::string& silent = best->first;
      cause.worker_id = silent;
      const bool one = blamed_by[silent].size() == 1;
      // A timeout alone does not say the process is gone: it may be alive and computing (the
      // diagnosis taken at the timeout, appended by the job manager, says which).
      const int timeouts = timed_out[silent];
      const int blamers = static_cast<int>(blamed_by[silent].size());
      const char* what = timeouts == 0
                             ? (one ? " lost its connection to it" : " lost their connection to it")
                         : timeouts == blamers ? " timed out waiting for it"
                                               : " lost their connection to it or timed out";
      root = absl::StrCat(
          Who(placement, silent), " stopped answering: ", one ? "its peer " : "its peers ",
          absl::StrJoin(blamed_by[silent], ", "), what, " and it reported no error (",
          timeouts == 0 ? "process killed, host down, or hung?"
                        : "process stopped, hung, or busy past the timeout?",
          ")");
      auto age = heartbeat_age.find(silent);
      if (age != heartbeat_age.end()) {
        absl::StrAppend(&root, absl::StrFormat("; its last heartbeat was %.1fs ago",
                                               absl::ToDoubleSeconds(age->second)));
      }
    } else if (std::string links = BrokenLinks(placement, failures); !links.empty()) {
      // 5: no worker is the common factor: the link (or links) is. Nobody is recorded as the
      // failed worker, so nobody is excluded from the job for it (recovery.h).
      root = std::move(links);
    } else {
      root = Describe(placement, failures.front());  // 6
      root_failure = &failures.front();
      cause.worker_id = root_failure->worker_id;
    }
  }
  // The transport detail: the first report that is not the root.
  for (const RankFailure& f : failures) {
    if (&f == root_failure) continue;
    absl::StrAppend(&root, "\n  then ", Describe(placement, f));
    break;
  }
  cause.reason = std::move(root);
  return cause;
}

}  // namespace dtrain::coordinator
