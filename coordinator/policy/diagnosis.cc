#include "coordinator/policy/diagnosis.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dtrain::coordinator {
namespace {

bool Open(const FlightEntry& e) {
  return e.state() == FlightEntry::STARTED || e.state() == FlightEntry::QUEUED;
}

bool IsAction(const FlightEntry& e) {
  return e.op() == FlightEntry::FORWARD || e.op() == FlightEntry::BACKWARD_INPUT ||
         e.op() == FlightEntry::BACKWARD_WEIGHT;
}

std::string Seconds(double s) { return absl::StrFormat("%.1f s", s); }

// "F of micro-batch 7, step 120".
std::string ActionText(const FlightEntry& e) {
  const char* name = e.op() == FlightEntry::FORWARD          ? "F"
                     : e.op() == FlightEntry::BACKWARD_INPUT ? "B"
                                                             : "W";
  std::string text = absl::StrCat(name, " of micro-batch ", e.micro_batch());
  if (e.virtual_stage() > 0) absl::StrAppend(&text, " (virtual stage ", e.virtual_stage(), ")");
  return absl::StrCat(text, ", step ", e.step());
}

// What a message is, from the receiver's side: "activation (step 12, micro-batch 3)".
std::string MessageText(const FlightEntry& e) {
  switch (e.kind()) {
    case ACTIVATION:
      return absl::StrCat("activation (step ", e.step(), ", micro-batch ", e.micro_batch(), ")");
    case GRADIENT:
      return absl::StrCat("gradient (step ", e.step(), ", micro-batch ", e.micro_batch(), ")");
    default:
      return absl::StrCat("message of collective group ", e.group(), " seq ", e.seq());
  }
}

// Whether two entries (a send and a receive) name the same message.
bool SameMessage(const FlightEntry& a, const FlightEntry& b) {
  if (a.kind() != b.kind()) return false;
  if (a.kind() == COLLECTIVE) {
    return a.group() == b.group() && a.seq() == b.seq() && a.part() == b.part();
  }
  return a.step() == b.step() && a.micro_batch() == b.micro_batch() &&
         a.virtual_stage() == b.virtual_stage();
}

// The newest open entry of `rank` for which `pick` holds, or null.
template <typename Pick>
const FlightEntry* NewestOpen(const RankDiagnosis& r, Pick pick) {
  for (int i = r.entries_size() - 1; i >= 0; --i) {
    const FlightEntry& e = r.entries(i);
    if (Open(e) && pick(e)) return &e;
  }
  return nullptr;
}

double Age(const RankDiagnosis& r, const FlightEntry& e) {
  return std::max<double>(0, static_cast<double>(r.now_unix_ns() - e.start_unix_ns()) / 1e9);
}

// What the rank is after: its open receive, collective, action and checkpoint phase.
struct Now {
  const FlightEntry* recv = nullptr;
  const FlightEntry* collective = nullptr;
  const FlightEntry* action = nullptr;
  const FlightEntry* checkpoint = nullptr;
};

Now NowOf(const RankDiagnosis& r) {
  Now n;
  n.recv = NewestOpen(r, [](const FlightEntry& e) { return e.op() == FlightEntry::RECV; });
  n.collective =
      NewestOpen(r, [](const FlightEntry& e) { return e.op() == FlightEntry::COLLECTIVE; });
  n.action = NewestOpen(r, IsAction);
  n.checkpoint =
      NewestOpen(r, [](const FlightEntry& e) { return e.op() == FlightEntry::CHECKPOINT; });
  return n;
}

// The receive a rank whose run just failed gave up on: its newest entries all failed (the
// receive, and the collective and action around it), and one of them is a receive. Null
// otherwise.
const FlightEntry* GaveUpOn(const RankDiagnosis& r) {
  for (int i = r.entries_size() - 1; i >= 0; --i) {
    const FlightEntry& e = r.entries(i);
    if (e.state() != FlightEntry::FAILED) return nullptr;
    if (e.op() == FlightEntry::RECV) return &e;
  }
  return nullptr;
}

// "rank 5 (w6, dp0 pp1 tp1)".
std::string Who(const RankState& r) {
  return absl::StrCat("rank ", r.rank(), " (", r.worker_id(), ", ", r.label(), ")");
}

// Fills doing, doing_seconds, compute and waits_on of an answered rank.
void Describe(RankState& r, double threshold) {
  const RankDiagnosis& d = r.recorder();
  const Now n = NowOf(d);
  std::string in;
  if (n.action != nullptr) in = absl::StrCat(", in ", ActionText(*n.action));
  if (n.collective != nullptr) {
    in = absl::StrCat(", in ", n.collective->what(), " (group ", n.collective->group(), " seq ",
                      n.collective->seq(), ")");
  }
  if (n.recv != nullptr) {
    const double age = Age(d, *n.recv);
    r.set_doing(absl::StrCat("waits for rank ", n.recv->peer(), "'s ", MessageText(*n.recv),
                             " for ", Seconds(age), in));
    r.set_doing_seconds(age);
    if (age >= threshold) r.add_waits_on(n.recv->peer());
  } else if (n.collective != nullptr) {
    const double age = Age(d, *n.collective);
    r.set_doing(absl::StrCat("in ", n.collective->what(), " (group ", n.collective->group(),
                             " seq ", n.collective->seq(), ") for ", Seconds(age)));
    r.set_doing_seconds(age);
  } else if (n.action != nullptr) {
    const double age = Age(d, *n.action);
    r.set_doing(absl::StrCat("is in ", ActionText(*n.action), ", for ", Seconds(age),
                             " (compute, not communication)"));
    r.set_doing_seconds(age);
    r.set_compute(true);
  } else if (n.checkpoint != nullptr) {
    const double age = Age(d, *n.checkpoint);
    r.set_doing(absl::StrCat("is in checkpoint ", n.checkpoint->what(), " for ", Seconds(age)));
    r.set_doing_seconds(age);
  } else if (const FlightEntry* recv = GaveUpOn(d); recv != nullptr) {
    // Its run failed in that wait (timed out, or told by a peer that gave up): still on the
    // chain of waits, towards the rank it waited for.
    const double waited =
        std::max<double>(0, static_cast<double>(recv->end_unix_ns() - recv->start_unix_ns()) / 1e9);
    r.set_doing(absl::StrCat("gave up waiting for rank ", recv->peer(), "'s ", MessageText(*recv),
                             " after ", Seconds(waited), " (its run failed)"));
    r.set_doing_seconds(waited);
    r.add_waits_on(recv->peer());
  } else if (d.entries_size() > 0) {
    const FlightEntry& last = d.entries(d.entries_size() - 1);
    const double since = std::max<double>(
        0,
        static_cast<double>(d.now_unix_ns() - std::max(last.end_unix_ns(), last.start_unix_ns())) /
            1e9);
    r.set_doing(absl::StrCat("is between operations (last ended ", Seconds(since), " ago)"));
    r.set_doing_seconds(since);
  } else {
    r.set_doing("has recorded nothing yet");
  }
}

// A rank that timed out (DiagnosisOptions::timed_out): waiting on the ranks it blamed.
void DescribeTimedOut(RankState& r, const TimedOutRank& t, const std::set<int>& ranks) {
  for (int on : t.on) {
    if (on != r.rank() && ranks.count(on) > 0) r.add_waits_on(on);
  }
  const std::vector<int> on(r.waits_on().begin(), r.waits_on().end());
  r.set_doing(absl::StrCat("timed out", on.empty() ? "" : " waiting on ",
                           on.empty() ? "" : RankList(on), ": ", t.error));
}

std::string NotAnswered(const RankState& r, const DiagnosisOptions& o) {
  std::string text =
      absl::StrCat("rank ", r.rank(), " on ", r.worker_id(), " (", r.label(),
                   ") did not answer in ", absl::FormatDuration(o.deadline), ": process alive?");
  if (r.heartbeat_age_seconds() >= 0) {
    absl::StrAppend(&text, " last heartbeat ", Seconds(r.heartbeat_age_seconds()), " ago");
  }
  if (!r.error().empty()) absl::StrAppend(&text, " (", r.error(), ")");
  return text;
}

// Collectives whose waiting members are at different sequence numbers of one group.
void SequenceMismatches(const JobDiagnosis& d, double threshold,
                        std::vector<std::string>* findings) {
  // group -> seq -> (ranks, what)
  std::map<int, std::map<int64_t, std::pair<std::vector<int>, std::string>>> open;
  for (const RankState& r : d.ranks()) {
    if (!r.answered()) continue;
    const FlightEntry* c = NowOf(r.recorder()).collective;
    if (c == nullptr || Age(r.recorder(), *c) < threshold) continue;
    auto& [ranks, what] = open[c->group()][c->seq()];
    ranks.push_back(r.rank());
    what = c->what();
  }
  for (const auto& [group, seqs] : open) {
    if (seqs.size() < 2) continue;
    std::vector<std::string> sides;
    for (const auto& [seq, side] : seqs) {
      sides.push_back(absl::StrCat(RankList(side.first), " at seq ", seq, " (", side.second, ")"));
    }
    findings->push_back(absl::StrCat("sequence mismatch in collective group ", group, ": ",
                                     absl::StrJoin(sides, "; "),
                                     ": the ranks called different collectives"));
  }
}

// Receives waiting for a message the (answering) sender never sent, or sent without it
// arriving.
void MissingSends(const JobDiagnosis& d, double threshold, std::vector<std::string>* findings) {
  std::map<int, const RankState*> by_rank;
  for (const RankState& r : d.ranks()) by_rank[r.rank()] = &r;
  for (const RankState& r : d.ranks()) {
    if (!r.answered()) continue;
    const FlightEntry* recv = NowOf(r.recorder()).recv;
    if (recv == nullptr || Age(r.recorder(), *recv) < threshold) continue;
    auto it = by_rank.find(recv->peer());
    // A sender that waits itself is on the chain of waits, which says more than this.
    if (it == by_rank.end() || !it->second->answered() || it->second->waits_on_size() > 0) {
      continue;
    }
    const RankState& sender = *it->second;
    const RankDiagnosis& s = sender.recorder();
    const FlightEntry* sent = nullptr;
    for (const FlightEntry& e : s.entries()) {
      if (e.op() == FlightEntry::SEND && e.peer() == r.rank() && SameMessage(e, *recv)) sent = &e;
    }
    const std::string waits = absl::StrCat("rank ", r.rank(), " waits for rank ", sender.rank(),
                                           "'s ", MessageText(*recv));
    if (sent == nullptr) {
      findings->push_back(
          absl::StrCat(waits, ", which it has not sent: ", Who(sender), " ", sender.doing()));
    } else if (sent->state() == FlightEntry::DONE) {
      findings->push_back(absl::StrCat(waits, ": sent ", Seconds(Age(s, *sent)),
                                       " ago but not received (network?)"));
    }
  }
}

// What the direct waiters of a root wait for: "its activation", "in all-reduce ... seq 8812".
std::string WaitsFor(const RankState& waiter) {
  const Now n = NowOf(waiter.recorder());
  if (n.recv == nullptr) return "on it";
  switch (n.recv->kind()) {
    case ACTIVATION:
      return "on its activation";
    case GRADIENT:
      return "on its gradient";
    default:
      break;
  }
  if (n.collective != nullptr) {
    return absl::StrCat("in ", n.collective->what(), " (group ", n.collective->group(), " seq ",
                        n.collective->seq(), ")");
  }
  return "on its collective message";
}

}  // namespace

std::string RankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j >= i + 2 ? absl::StrCat(ranks[i], "-", ranks[j])
                               : absl::StrJoin(ranks.begin() + i, ranks.begin() + j + 1, ", "));
    i = j + 1;
  }
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(parts, ", "));
}

namespace {

// Each waiting rank's chain followed to where it ends: a rank that waits on nobody (a root, with
// every rank whose chain ends there) or one already on the chain (a cycle, smallest rank first).
struct WaitChains {
  std::map<int, std::vector<int>> waiters_of_root;
  std::set<std::vector<int>> cycles;
};

WaitChains FollowWaits(const JobDiagnosis& d, const std::map<int, RankState*>& by_rank) {
  auto next = [&](int rank) -> int {
    auto it = by_rank.find(rank);
    if (it == by_rank.end() || it->second->waits_on_size() == 0) return -1;
    return it->second->waits_on(0);
  };
  WaitChains chains;
  for (const RankState& r : d.ranks()) {
    if (r.waits_on_size() == 0) continue;
    std::vector<int> chain = {r.rank()};
    int cur = r.rank();
    while (true) {
      const int n = next(cur);
      if (n < 0) {
        chains.waiters_of_root[cur].push_back(r.rank());
        break;
      }
      auto seen = std::find(chain.begin(), chain.end(), n);
      if (seen != chain.end()) {
        std::vector<int> cycle(seen, chain.end());
        std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
        chains.cycles.insert(cycle);
        break;
      }
      chain.push_back(n);
      cur = n;
    }
  }
  return chains;
}

std::string CycleFinding(const std::vector<int>& cycle) {
  std::vector<std::string> names;
  for (int r : cycle) names.push_back(absl::StrCat(r));
  names.push_back(names.front());
  return absl::StrCat("ranks ", absl::StrJoin(names, " -> "),
                      " wait on each other in a cycle (a deadlock)");
}

// "root: rank 5 (...) is in F ...; rank 6 waits on its activation; ranks 1-4 wait on those".
std::string RootFinding(int root, const std::vector<int>& waiters,
                        const std::map<int, RankState*>& by_rank,
                        const std::map<int, const TimedOutRank*>& timed_out,
                        const DiagnosisOptions& options) {
  const RankState& r = *by_rank.at(root);
  std::string line = absl::StrCat("root: ", Who(r), " ");
  if (!r.answered()) {
    absl::StrAppend(&line, "did not answer in ", absl::FormatDuration(options.deadline),
                    " (process stopped or hung?");
    if (r.heartbeat_age_seconds() >= 0) {
      absl::StrAppend(&line, " last heartbeat ", Seconds(r.heartbeat_age_seconds()), " ago");
    }
    absl::StrAppend(&line, ")");
  } else {
    absl::StrAppend(&line, r.doing());
  }
  // Direct waiters grouped by what they wait for (those that timed out first); the rest wait
  // on those.
  std::vector<int> gave_up;
  std::map<std::string, std::vector<int>> direct;
  std::vector<int> indirect;
  for (int w : waiters) {
    const RankState& ws = *by_rank.at(w);
    if (ws.waits_on(0) != root) {
      indirect.push_back(w);
    } else if (timed_out.count(w) > 0) {
      gave_up.push_back(w);
    } else {
      direct[WaitsFor(ws)].push_back(w);
    }
  }
  if (!gave_up.empty()) {
    absl::StrAppend(&line, "; ", RankList(gave_up), " timed out waiting on it");
  }
  for (const auto& [what, ranks] : direct) {
    absl::StrAppend(&line, "; ", RankList(ranks), ranks.size() == 1 ? " waits " : " wait ", what);
  }
  if (!indirect.empty()) {
    absl::StrAppend(&line, "; ", RankList(indirect),
                    indirect.size() == 1 ? " waits on those" : " wait on those");
  }
  return line;
}

}  // namespace

JobDiagnosis Analyse(JobDiagnosis d, const DiagnosisOptions& options) {
  const double threshold = absl::ToDoubleSeconds(options.wait_threshold);
  d.set_wait_threshold_seconds(threshold);
  d.clear_findings();
  d.clear_root_ranks();
  std::map<int, RankState*> by_rank;
  std::map<int, const TimedOutRank*> timed_out;
  std::set<int> ranks;
  for (const RankState& r : d.ranks()) ranks.insert(r.rank());
  for (const TimedOutRank& t : options.timed_out) timed_out[t.rank] = &t;
  for (RankState& r : *d.mutable_ranks()) {
    r.clear_waits_on();
    by_rank[r.rank()] = &r;
    if (auto t = timed_out.find(r.rank()); t != timed_out.end()) {
      DescribeTimedOut(r, *t->second, ranks);
    } else if (r.answered()) {
      Describe(r, threshold);
    }
  }
  std::vector<std::string> findings;
  for (const RankState& r : d.ranks()) {
    if (!r.answered() && timed_out.count(r.rank()) == 0) {
      findings.push_back(NotAnswered(r, options));
    }
  }
  SequenceMismatches(d, threshold, &findings);
  MissingSends(d, threshold, &findings);

  const WaitChains chains = FollowWaits(d, by_rank);
  for (const std::vector<int>& cycle : chains.cycles) findings.push_back(CycleFinding(cycle));
  // Roots, the one with most waiters first.
  std::vector<std::pair<int, std::vector<int>>> roots(chains.waiters_of_root.begin(),
                                                      chains.waiters_of_root.end());
  std::stable_sort(roots.begin(), roots.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::string summary;
  for (const auto& [root, waiters] : roots) {
    std::string line = RootFinding(root, waiters, by_rank, timed_out, options);
    d.add_root_ranks(root);
    if (summary.empty()) summary = line;
    findings.push_back(line);
  }
  if (summary.empty() && !findings.empty()) summary = findings.front();
  if (summary.empty()) {
    summary = absl::StrCat("healthy: no rank waiting longer than ", Seconds(threshold));
  }
  d.set_summary(summary);
  for (std::string& f : findings) d.add_findings(std::move(f));
  // Keep the newest entries of each recorder.
  for (RankState& r : *d.mutable_ranks()) {
    auto* entries = r.mutable_recorder()->mutable_entries();
    const int drop = entries->size() - options.keep_entries;
    if (drop > 0) entries->DeleteSubrange(0, drop);
  }
  return d;
}

}  // namespace dtrain::coordinator
