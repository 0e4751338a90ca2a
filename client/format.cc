#include "client/format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/wrappers.pb.h"
#include "plan/ranks.h"
#include "plan/spec_enums.h"

namespace dtrain {
namespace client {
namespace {

int Or1(int v) { return v > 0 ? v : 1; }

// Cuts `text` to `width` characters, ending in "..." when cut.
std::string Truncate(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  return text.substr(0, width - 3) + "...";
}

// A reason on one line of `list`: its lines joined with " | ", and one longer than 120
// characters cut in the middle (its start says what happened, its end often names a path);
// `dtrain status` shows it whole.
std::string ReasonCell(const std::string& reason) {
  std::vector<absl::string_view> lines;
  for (absl::string_view l : absl::StrSplit(reason, '\n', absl::SkipWhitespace())) {
    lines.push_back(absl::StripAsciiWhitespace(l));
  }
  std::string line = absl::StrJoin(lines, " | ");
  constexpr size_t kMax = 120, kHead = 60;
  if (line.size() <= kMax) return line;
  return absl::StrCat(line.substr(0, kHead), " ... ",
                      line.substr(line.size() - (kMax - kHead - 5)));
}

std::string StepOf(const Job& job) {
  if (!job.has_latest() || job.latest().step() == 0) {
    return absl::StrCat("-/", job.spec().steps());
  }
  return absl::StrCat(job.latest().step(), "/", job.spec().steps());
}

}  // namespace

std::string JobStateName(JobState state) {
  if (JobState_IsValid(state)) return JobState_Name(state);
  return absl::StrCat("UNKNOWN(", static_cast<int>(state), ")");
}

std::string WorkerStateName(WorkerState state) {
  if (WorkerState_IsValid(state)) return WorkerState_Name(state);
  return absl::StrCat("UNKNOWN(", static_cast<int>(state), ")");
}

bool IsFinalState(JobState state) {
  return state == SUCCEEDED || state == FAILED || state == CANCELLED;
}

std::string FormatThousands(int64_t value) {
  const bool negative = value < 0;
  // Through uint64 so that INT64_MIN negates without overflow.
  uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  std::string digits = absl::StrCat(magnitude);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

std::string FormatEta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  const int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  if (h > 0) return absl::StrFormat("%d:%02d:%02d", h, m, s);
  return absl::StrFormat("%d:%02d", m, s);
}

std::string FormatSpan(absl::Duration span) {
  const double s = std::max(0.0, absl::ToDoubleSeconds(span));
  if (s < 10) return absl::StrFormat("%.1fs", s);
  const int64_t t = static_cast<int64_t>(s);
  if (t < 60) return absl::StrFormat("%ds", t);
  if (t < 3600) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  if (t < 86400) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  return absl::StrFormat("%dd", t / 86400);
}

std::string FormatAge(absl::Time then, absl::Time now) {
  if (then == absl::UnixEpoch() || then == absl::InfinitePast()) return "never";
  return FormatSpan(now - then);
}

std::string FormatClock(absl::Time when, absl::Time now) {
  if (when == absl::UnixEpoch() || when == absl::InfinitePast()) return "-";
  const absl::TimeZone zone = absl::LocalTimeZone();
  if (absl::FormatTime("%Y-%m-%d", when, zone) == absl::FormatTime("%Y-%m-%d", now, zone)) {
    return absl::FormatTime("%H:%M:%S", when, zone);
  }
  return absl::FormatTime("%Y-%m-%d %H:%M", when, zone);
}

absl::Time FromUnixMs(int64_t unix_ms) { return absl::FromUnixMillis(unix_ms); }

std::string JobDuration(const Job& job, absl::Time now) {
  if (job.started_unix_ms() <= 0) return "-";
  const absl::Time end = job.ended_unix_ms() > 0 ? FromUnixMs(job.ended_unix_ms()) : now;
  return FormatSpan(end - FromUnixMs(job.started_unix_ms()));
}

std::string JobReason(const Job& job) {
  if (job.state() != QUEUED || job.queue_position() <= 0) return job.reason();
  const std::string position =
      job.queue_position() == 1 ? std::string("next in the queue")
                                : absl::StrCat("position ", job.queue_position(), " in the queue");
  return job.reason().empty() ? position : absl::StrCat(position, "; ", job.reason());
}

std::string StateText(JobState state, const std::string& reason) {
  const std::string name = JobStateName(state);
  absl::string_view rest = reason;
  // "queued; placing it now" after QUEUED says "queued" twice: drop the word and its separator.
  if (absl::StartsWithIgnoreCase(rest, name)) {
    rest.remove_prefix(name.size());
    if (rest.empty() || !absl::ascii_isalnum(rest[0])) {
      rest = absl::StripLeadingAsciiWhitespace(
          absl::StripPrefix(absl::StripPrefix(absl::StripLeadingAsciiWhitespace(rest), ";"), ":"));
    } else {
      rest = reason;  // "queuedness": another word
    }
  }
  if (rest.empty()) return name;
  return absl::StrCat(name, ": ", rest);
}

std::string FormatLoss(double loss) { return absl::StrFormat("%.4f", loss); }

int64_t TokensPerStep(const JobSpec& spec) {
  const int64_t seq = spec.seq_len() > 0 ? spec.seq_len() : spec.model().context();
  return static_cast<int64_t>(spec.batch_size()) * seq;
}

void StepRate::Add(const StepMetrics& step) {
  if (step.tokens_per_s() > 0) last_tokens_per_s_ = step.tokens_per_s();
  if (step.time_unix_ms() <= 0) return;
  // Steps arrive in order; a replay after a reconnect may repeat some: keep the window sorted.
  if (!samples_.empty() && step.step() <= samples_.back().step) return;
  samples_.push_back({step.step(), step.time_unix_ms()});
  while (static_cast<int>(samples_.size()) > window_) samples_.pop_front();
}

std::optional<double> StepRate::SecondsPerStep(const JobSpec& spec) const {
  if (samples_.size() >= 2) {
    const Sample& a = samples_.front();
    const Sample& b = samples_.back();
    if (b.step > a.step && b.time_unix_ms >= a.time_unix_ms) {
      return (b.time_unix_ms - a.time_unix_ms) / 1000.0 / static_cast<double>(b.step - a.step);
    }
  }
  const int64_t tokens = TokensPerStep(spec);
  if (last_tokens_per_s_ > 0 && tokens > 0) return tokens / last_tokens_per_s_;
  return std::nullopt;
}

std::optional<double> StepRate::EtaSeconds(const JobSpec& spec) const {
  std::optional<double> per_step = SecondsPerStep(spec);
  if (!per_step.has_value() || samples_.empty()) return std::nullopt;
  const int64_t remaining = std::max<int64_t>(0, spec.steps() - samples_.back().step);
  return *per_step * static_cast<double>(remaining);
}

std::string ProgressLine(const Job& job, std::optional<double> eta_seconds) {
  const std::string state = JobStateName(job.state());
  if (job.state() == RUNNING && job.has_latest() && job.latest().step() > 0) {
    const StepMetrics& m = job.latest();
    return absl::StrCat(
        job.id(), " ", state, " step ", m.step(), "/", job.spec().steps(), " loss ",
        FormatLoss(m.loss()), " ",
        m.has_val_loss() ? absl::StrCat("val_loss ", FormatLoss(m.val_loss()), " ") : "",
        FormatThousands(static_cast<int64_t>(std::llround(m.tokens_per_s()))), " tok/s ETA ",
        FormatEta(eta_seconds.value_or(-1)));
  }
  return absl::StrCat(job.id(), " ", StateText(job.state(), JobReason(job)));
}

std::string StateChangeLine(const std::string& job_id, const StateChange& change) {
  return absl::StrCat(job_id, " ", StateText(change.state(), change.reason()));
}

std::string SummaryLine(const Job& job, std::optional<double> first_loss) {
  std::string line = absl::StrCat(job.id(), " ", JobStateName(job.state()));
  const bool has_step = job.has_latest() && job.latest().step() > 0;
  if (job.state() != SUCCEEDED && has_step) {
    absl::StrAppend(&line, " at step ", job.latest().step(), "/", job.spec().steps());
  }
  if (!job.reason().empty() && job.state() != SUCCEEDED) {
    absl::StrAppend(&line, ": ", job.reason());
  }
  std::vector<std::string> parts;
  if (job.state() == SUCCEEDED && has_step) {
    parts.push_back(absl::StrCat(job.latest().step(), "/", job.spec().steps(), " steps"));
  }
  if (has_step) {
    if (first_loss.has_value()) {
      parts.push_back(
          absl::StrCat("loss ", FormatLoss(*first_loss), " -> ", FormatLoss(job.latest().loss())));
    } else {
      parts.push_back(absl::StrCat("loss ", FormatLoss(job.latest().loss())));
    }
  }
  if (!job.output().empty()) {
    parts.push_back(absl::StrCat("output ", PathOnHost(job.output(), job.output_host())));
  }
  if (!parts.empty()) {
    absl::StrAppend(&line, job.state() == SUCCEEDED ? ": " : "; ", absl::StrJoin(parts, ", "));
  }
  return line;
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(header);
  for (const auto& row : rows) measure(row);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      absl::StrAppend(&line, cell);
      if (i + 1 < width.size()) line.append(width[i] - cell.size() + 2, ' ');
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

std::string PathOnHost(const std::string& path, const std::string& host) {
  if (host.empty()) return path;
  return absl::StrCat(path, " on ", host);
}

std::string WorkersTable(const ListWorkersResponse& workers, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  for (const WorkerInfo& w : workers.workers()) {
    std::string device = w.device().name().empty() ? w.device().kind() : w.device().name();
    // A drained worker still running its job: "BUSY,DRAINING" until the job moved off it.
    const std::string state = absl::StrCat(WorkerStateName(w.state()),
                                           w.draining() && w.state() == BUSY ? ",DRAINING" : "");
    rows.push_back({w.worker_id(), state, device, w.host_label().empty() ? "-" : w.host_label(),
                    w.job_id().empty() ? "-" : w.job_id(),
                    FormatAge(absl::FromUnixMillis(w.last_heartbeat_unix_ms()), now),
                    // Where its jobs may read and write (--data_root, --allowed_paths).
                    w.allowed_roots().empty() ? "-" : absl::StrJoin(w.allowed_roots(), ",")});
  }
  return FormatTable({"ID", "STATE", "DEVICE", "HOST", "JOB", "HEARTBEAT", "ROOTS"}, rows);
}

namespace {

// plan::JobCurrentLayout of a job from the coordinator.
plan::CurrentLayout JobCurrentLayout(const Job& job) {
  const std::vector<Recovery> recoveries(job.recoveries().begin(), job.recoveries().end());
  return plan::JobCurrentLayout(job.spec(), recoveries);
}

// "shrunk" or "changed": how a recovery's layout compares with the submitted one.
std::string LayoutChange(const ParallelLayout& now, const ParallelLayout& submitted) {
  return plan::WorkersNeeded(now) < plan::WorkersNeeded(submitted) ? "shrunk" : "changed";
}

// The LAYOUT cell of `dtrain list`: the current layout, "(shrunk)" when a recovery changed it.
std::string CurrentLayoutCell(const Job& job) {
  const plan::CurrentLayout current = JobCurrentLayout(job);
  if (current.changed_by_recovery == 0) return LayoutString(current.layout);
  return absl::StrCat(LayoutString(current.layout), " (",
                      LayoutChange(current.layout, job.spec().parallel()), ")");
}

}  // namespace

std::string JobsTable(const ListJobsResponse& jobs, absl::Time now) {
  // A PRIORITY column only where a job listed has one other than the default.
  const bool priorities = std::any_of(jobs.jobs().begin(), jobs.jobs().end(),
                                      [](const Job& job) { return job.spec().priority() != 0; });
  std::vector<std::vector<std::string>> rows;
  for (const Job& job : jobs.jobs()) {
    const bool has_step = job.has_latest() && job.latest().step() > 0;
    const int recoveries = job.recoveries_size();
    rows.push_back({job.id(),
                    recoveries == 0 ? JobStateName(job.state())
                                    : absl::StrCat(JobStateName(job.state()), " (", recoveries,
                                                   recoveries == 1 ? " recovery)" : " recoveries)"),
                    job.spec().name().empty() ? "-" : Truncate(job.spec().name(), 24), StepOf(job),
                    has_step ? FormatLoss(job.latest().loss()) : "-", CurrentLayoutCell(job),
                    FormatAge(FromUnixMs(job.submitted_unix_ms()), now) + " ago",
                    FormatClock(FromUnixMs(job.started_unix_ms()), now),
                    FormatClock(FromUnixMs(job.ended_unix_ms()), now), JobDuration(job, now),
                    job.reason().empty() ? "-" : ReasonCell(JobReason(job))});
    if (priorities)
      rows.back().insert(rows.back().begin() + 3, absl::StrCat(job.spec().priority()));
  }
  std::vector<std::string> header = {"ID",        "STATE",   "NAME",  "STEP",     "LOSS",  "LAYOUT",
                                     "SUBMITTED", "STARTED", "ENDED", "DURATION", "REASON"};
  if (priorities) header.insert(header.begin() + 3, "PRIORITY");
  return FormatTable(header, rows);
}

std::string LayoutString(const ParallelLayout& layout) {
  const int dp = Or1(layout.dp()), pp = Or1(layout.pp()), tp = Or1(layout.tp());
  return absl::StrCat("dp=", dp, " pp=", pp, " tp=", tp);
}

std::string DeviceAndPrecisionText(const JobSpec& spec) {
  return absl::StrCat(plan::DeviceText(plan::PlannedDevice(spec)), ", matmul ",
                      plan::MatmulPrecisionText(plan::PlannedMatmulPrecision(spec)));
}

std::string CurrentLayoutText(const Job& job) {
  const plan::CurrentLayout current = JobCurrentLayout(job);
  const int64_t workers = plan::WorkersNeeded(current.layout);
  std::string text = absl::StrCat(LayoutString(current.layout), " (", workers,
                                  workers == 1 ? " worker" : " workers");
  if (current.changed_by_recovery > 0) {
    absl::StrAppend(&text, "; ", LayoutChange(current.layout, job.spec().parallel()), " from ",
                    LayoutString(job.spec().parallel()), " by recovery ",
                    current.changed_by_recovery);
  }
  return text + ")";
}

std::string StageCutText(const Job& job) {
  std::map<int, int> layers;  // pp rank -> layers of its dp0 tp0 rank
  for (const RankAssignment& r : job.placement().ranks()) {
    if (r.chunks_size() > 1) return "";  // interleaved: several chunks per stage
    if (r.dp_rank() == 0 && r.tp_rank() == 0) layers[r.pp_rank()] = r.num_layers();
  }
  if (layers.size() < 2) return "";
  std::vector<int> cut;
  for (const auto& [stage, n] : layers) cut.push_back(n);
  std::string why =
      job.spec().parallel().stage_layers().empty() ? "the plan's balance" : "parallel.stage_layers";
  for (const Recovery& r : job.recoveries()) {
    if (!r.rebalance_to().empty()) why = absl::StrCat("rebalanced by recovery ", r.number());
  }
  return absl::StrCat(absl::StrJoin(cut, ","), " (", why, ")");
}

namespace {

// The "checkpoint:", "skipped:" (a step newer than every sealed one that was not written) and
// "sealed:" lines of JobDetail; none for a job that keeps no checkpoints.
void CheckpointLines(const Job& job, absl::Time now,
                     const std::function<void(absl::string_view, const std::string&)>& line) {
  const CheckpointStatus& c = job.checkpoint();
  const int64_t interval = job.spec().checkpoint().interval_steps();
  if (c.dir().empty() && job.spec().checkpoint().dir().empty()) return;
  const std::string every =
      interval > 0 ? absl::StrCat("every ", interval, " steps") : "at the end only";
  if (c.dir().empty()) {
    line("checkpoint",
         absl::StrCat(job.spec().checkpoint().dir(), "/", job.id(), " (not created yet), ", every));
    return;
  }
  line("checkpoint",
       absl::StrCat(PathOnHost(c.dir(), c.host()), ", ", every,
                    c.dir_bytes() > 0
                        ? absl::StrFormat(", %.1f MiB on disk",
                                          static_cast<double>(c.dir_bytes()) / (1 << 20))
                        : ""));
  const int64_t latest = job.has_latest() ? job.latest().step() : 0;
  if (c.last_skipped_step() > c.last_sealed_step()) {  // newer than every seal: still so
    line("skipped", absl::StrCat("step ", c.last_skipped_step(), ": ", c.last_skip_reason()));
  }
  if (c.last_sealed_step() <= 0) {
    line("sealed", latest > 0 ? absl::StrCat("none yet; a resume would redo all ", latest, " steps")
                              : "none yet");
    return;
  }
  const int64_t redo = std::max<int64_t>(0, latest - c.last_sealed_step());
  line("sealed",
       absl::StrCat("step ", c.last_sealed_step(),
                    c.sealed_unix_ms() > 0
                        ? absl::StrCat(" at ", FormatClock(FromUnixMs(c.sealed_unix_ms()), now))
                        : "",
                    "; a resume would redo ", redo, redo == 1 ? " step" : " steps", " after it"));
}

}  // namespace

std::string StragglersText(const Job& job) {
  const StragglerSpec& spec = job.spec().stragglers();
  std::vector<StragglerScore> scores(job.stragglers().begin(), job.stragglers().end());
  // The slowest first: the flagged ranks lead, and a big job's line ends after a few.
  std::stable_sort(
      scores.begin(), scores.end(),
      [](const StragglerScore& a, const StragglerScore& b) { return a.score() > b.score(); });
  constexpr size_t kShown = 4;
  std::vector<std::string> ranks;
  for (size_t i = 0; i < scores.size() && i < kShown; ++i) {
    const StragglerScore& s = scores[i];
    ranks.push_back(absl::StrFormat("rank %d (%s, %s) %.1fx%s", s.rank(), s.worker_id(), s.label(),
                                    s.score(), s.flagged() ? " FLAGGED" : ""));
  }
  if (scores.size() > kShown) ranks.push_back(absl::StrCat(scores.size() - kShown, " more"));
  const int64_t end = scores.front().window_end_step();
  int flagged = 0;
  for (const StragglerScore& s : scores) flagged += s.flagged() ? 1 : 0;
  return absl::StrFormat("%s over steps %d-%d (threshold %.2gx, policy %s): %s",
                         flagged == 0 ? "none" : absl::StrCat(flagged, " flagged"),
                         end - spec.window_steps() + 1, end, spec.threshold(), spec.policy(),
                         absl::StrJoin(ranks, "; "));
}

std::string RecoveryText(const Recovery& r) {
  const std::string cause = r.cause().substr(0, r.cause().find('\n'));
  std::string text = absl::StrCat(
      "  ", r.number(), ". ",
      absl::FormatTime("%H:%M:%S", FromUnixMs(r.started_unix_ms()), absl::LocalTimeZone()),
      " at step ", r.last_step(), ": ", cause);
  if (r.workers_size() == 0) return absl::StrCat(text, "\n     (placing it again)");
  absl::StrAppend(&text, "\n     on ", LayoutString(r.layout()), " (",
                  absl::StrJoin(r.workers(), ", "), ")");
  if (r.load_ms() == 0 && !r.done()) return absl::StrCat(text, "; loading");
  absl::StrAppend(
      &text, "; resumed from ",
      r.resumed_from_step() > 0 ? absl::StrCat("step ", r.resumed_from_step()) : "the start", ", ",
      r.steps_redone(), r.steps_redone() == 1 ? " step" : " steps", " redone");
  if (!r.done()) return text;
  const auto s = [](int64_t ms) { return absl::StrFormat("%.1fs", ms / 1000.0); };
  absl::StrAppend(&text, "\n     detect ", s(r.detect_ms()), ", stop ", s(r.stop_ms()), ", place ",
                  s(r.place_ms()), ", load ", s(r.load_ms()), ", first step ",
                  s(r.first_step_ms()));
  return text;
}

std::string JobDetail(const Job& job, absl::Time now) {
  const JobSpec& spec = job.spec();
  std::string out;
  const auto line = [&](absl::string_view key, const std::string& value) {
    absl::StrAppend(&out, absl::StrFormat("%-10s %s\n", absl::StrCat(key, ":"), value));
  };
  line("id", job.id());
  if (!spec.name().empty()) line("name", spec.name());
  line("state", StateText(job.state(), JobReason(job)));
  const absl::Time submitted = FromUnixMs(job.submitted_unix_ms());
  line("submitted", absl::StrCat(FormatClock(submitted, now), " (", FormatAge(submitted, now),
                                 " ago)", job.owner().empty() ? "" : " by ", job.owner()));
  if (job.started_unix_ms() > 0) {
    line("started", FormatClock(FromUnixMs(job.started_unix_ms()), now));
  }
  if (job.ended_unix_ms() > 0) line("ended", FormatClock(FromUnixMs(job.ended_unix_ms()), now));
  if (job.started_unix_ms() > 0) {
    line("duration", absl::StrCat(JobDuration(job, now), job.ended_unix_ms() > 0 ? "" : " so far"));
  }
  const ModelConfig& m = spec.model();
  line("model", absl::StrCat("vocab ", m.vocab_size(), ", context ", m.context(), ", ", m.n_layer(),
                             " layers, ", m.n_head(), " heads, width ", m.n_embd()));
  line("layout", CurrentLayoutText(job));
  if (const std::string cut = StageCutText(job); !cut.empty()) line("cut", cut);
  // Shown when the job asks for particular hardware or precision (not "auto" with fp32).
  if (plan::PlannedDevice(spec) != DEVICE_AUTO ||
      plan::PlannedMatmulPrecision(spec) != MATMUL_FP32) {
    line("device", DeviceAndPrecisionText(spec));
  }
  line("dataset", spec.dataset());
  if (spec.priority() != 0) line("priority", absl::StrCat(spec.priority()));
  if (job.has_latest() && job.latest().step() > 0) {
    const StepMetrics& s = job.latest();
    line("step", absl::StrCat(s.step(), "/", spec.steps(), ", loss ", FormatLoss(s.loss()), ", ",
                              FormatThousands(static_cast<int64_t>(std::llround(s.tokens_per_s()))),
                              " tok/s"));
  } else {
    line("step", absl::StrCat("-/", spec.steps()));
  }
  if (job.resumed_from_step() > 0) {
    line("resumed", absl::StrCat("from step ", job.resumed_from_step(),
                                 spec.resume_from().empty() ? "" : " of " + spec.resume_from()));
  }
  if (spec.has_eval()) {
    const ValidationSummary& v = job.validation();
    std::string text =
        absl::StrCat("every ", spec.eval().every_steps(), " steps on ", spec.eval().dataset(), " (",
                     spec.eval().batches(), " batches)");
    if (v.step() > 0) {
      absl::StrAppend(&text, "; val_loss ", FormatLoss(v.val_loss()), " at step ", v.step(),
                      ", best ", FormatLoss(v.best_val_loss()), " at step ", v.best_step());
    }
    if (spec.eval().has_early_stopping()) {
      absl::StrAppend(&text, "; early stopping: patience ", spec.eval().early_stopping().patience(),
                      ", min_delta ", spec.eval().early_stopping().min_delta());
    }
    if (job.end_reason() == END_EARLY_STOPPED) absl::StrAppend(&text, "; stopped early");
    line("validation", text);
  }
  CheckpointLines(job, now, line);
  if (job.stragglers_size() > 0) line("stragglers", StragglersText(job));
  if (job.recoveries_size() > 0) {
    absl::StrAppend(&out, "recoveries (fault_tolerance: max_restarts ",
                    spec.fault_tolerance().max_restarts(), ", ",
                    spec.fault_tolerance().on_worker_loss(), ", wait_for ",
                    spec.fault_tolerance().wait_for(), "):\n");
    for (const Recovery& r : job.recoveries()) absl::StrAppend(&out, RecoveryText(r), "\n");
  }
  if (!job.output().empty()) line("output", PathOnHost(job.output(), job.output_host()));
  if (job.placement().ranks_size() > 0) {
    absl::StrAppend(&out, "placement:\n");
    for (const RankAssignment& r : job.placement().ranks()) {
      absl::StrAppend(&out, absl::StrFormat("  dp%d pp%d tp%d  layers %d-%d  %s (%s)\n",
                                            r.dp_rank(), r.pp_rank(), r.tp_rank(), r.first_layer(),
                                            r.first_layer() + r.num_layers() - 1, r.worker_id(),
                                            r.worker_address()));
    }
  }
  if (job.history_size() > 0) {
    absl::StrAppend(&out, "history:\n");
    for (const StateChange& c : job.history()) {
      absl::StrAppend(&out, "  ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(c.time_unix_ms()),
                                       absl::LocalTimeZone()),
                      "  ", JobStateName(c.state()),
                      c.reason().empty() ? "" : absl::StrCat(": ", c.reason()), "\n");
    }
  }
  return out;
}

std::string CheckpointsText(const std::string& job_id, const ListCheckpointsResponse& response,
                            absl::Time now) {
  const CheckpointStatus& c = response.status();
  std::string out = absl::StrCat(job_id, " checkpoints: ");
  if (c.dir().empty()) {
    absl::StrAppend(&out, "no location reported yet (the job has not started)\n");
  } else {
    absl::StrAppend(&out, PathOnHost(c.dir(), c.host()), ", ",
                    c.interval_steps() > 0 ? absl::StrCat("every ", c.interval_steps(), " steps")
                                           : "at the end only",
                    "\n");
  }
  if (response.checkpoints_size() == 0) {
    absl::StrAppend(&out, "no sealed step yet\n");
    return out;
  }
  std::vector<std::vector<std::string>> rows;
  for (const CheckpointInfo& info : response.checkpoints()) {
    rows.push_back({absl::StrCat(info.step()), FormatClock(FromUnixMs(info.time_unix_ms()), now),
                    info.path()});
  }
  absl::StrAppend(&out, FormatTable({"STEP", "SEALED", "PATH"}, rows));
  return out;
}

std::string DiagnosisText(const JobDiagnosis& d) {
  std::string out = absl::StrCat(d.job_id(), ": ", d.summary(), "\n");
  for (const std::string& finding : d.findings()) {
    if (finding != d.summary()) absl::StrAppend(&out, "  ", finding, "\n");
  }
  std::vector<std::vector<std::string>> rows;
  for (const RankState& r : d.ranks()) {
    rows.push_back({absl::StrCat(r.rank()), r.worker_id(), r.label(),
                    r.answered() ? r.doing() : absl::StrCat("did not answer (", r.error(), ")")});
  }
  absl::StrAppend(&out, FormatTable({"RANK", "WORKER", "LAYOUT", "NOW"}, rows));
  absl::StrAppend(&out,
                  absl::StrFormat("asked %d ranks in %.1f s; waits under %.1f s are normal "
                                  "traffic\n",
                                  d.ranks_size(), d.gather_seconds(), d.wait_threshold_seconds()));
  return out;
}

std::string LogEntryLine(const LogEntry& entry) {
  const std::string when = absl::FormatTime("%Y-%m-%d %H:%M:%E3S", FromUnixMs(entry.time_unix_ms()),
                                            absl::LocalTimeZone());
  std::string source = entry.rank() < 0 ? "coordinator" : absl::StrCat("rank ", entry.rank());
  if (entry.rank() >= 0 && !entry.worker_id().empty()) {
    absl::StrAppend(&source, " (", entry.worker_id(), ")");
  }
  std::string level;
  switch (entry.severity()) {
    case LOG_WARNING:
      level = "WARNING";
      break;
    case LOG_ERROR:
      level = "ERROR";
      break;
    default:
      level = "INFO";
  }
  return absl::StrCat(when, " ", source, " ", level, " ", entry.text());
}

std::string KeepsRunningNote(const std::string& job_id, const std::string& coordinator) {
  return absl::StrCat(job_id, " keeps running; stop it with: dtrain ",
                      coordinator.empty() ? "" : absl::StrCat("--coordinator=", coordinator, " "),
                      "cancel ", job_id);
}

std::vector<std::string> SplitProblems(const std::string& message) {
  std::vector<std::string> lines;
  if (message.find('\n') != std::string::npos) {
    std::vector<std::string> raw = absl::StrSplit(message, '\n', absl::SkipWhitespace());
    for (size_t i = 0; i < raw.size(); ++i) {
      absl::string_view l = absl::StripAsciiWhitespace(raw[i]);
      // A header line such as "invalid job spec (3 problems):" is not a problem itself.
      if (i == 0 && raw.size() > 1 && absl::EndsWith(l, ":")) continue;
      absl::ConsumePrefix(&l, "- ");
      lines.emplace_back(l);
    }
  } else {
    for (absl::string_view part : absl::StrSplit(message, "; ", absl::SkipWhitespace())) {
      lines.emplace_back(absl::StripAsciiWhitespace(part));
    }
  }
  if (lines.empty()) lines.push_back(message);
  return lines;
}

std::string ToJsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  // Printing a valid message cannot fail; an empty object is the fallback.
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  return out;
}

namespace {

// `text` as a JSON string literal, escaped by protobuf's JSON printer (a StringValue prints as
// its bare string).
std::string JsonString(const std::string& text) {
  google::protobuf::StringValue value;
  value.set_value(text);
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(value, &out).ok()) return "\"\"";
  return out;
}

// The shortest text that reads back as `value`, in %g's style (0.0006, not 6e-04); null for NaN
// and infinities (not JSON).
std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  const std::to_chars_result end =
      std::to_chars(text, text + sizeof(text), value, std::chars_format::general);
  return std::string(text, end.ptr);
}

}  // namespace

std::string WatchJsonLine(const JobUpdate& update) {
  const Job& job = update.job();
  const char* type = update.has_step()                           ? "step"
                     : update.has_state_change()                 ? "state"
                     : update.update_case() == JobUpdate::kEvent ? "event"
                                                                 : "job";
  std::string line = absl::StrCat("{\"type\":\"", type, "\",\"job\":", JsonString(job.id()));
  auto field = [&line](absl::string_view name, const std::string& json) {
    absl::StrAppend(&line, ",\"", name, "\":", json);
  };
  if (update.has_step()) {
    const StepMetrics& m = update.step();
    field("step", absl::StrCat(m.step()));
    field("loss", JsonNumber(m.loss()));
    field("grad_norm", JsonNumber(m.grad_norm()));
    field("lr", JsonNumber(m.learning_rate()));
    field("tokens_per_s", JsonNumber(m.tokens_per_s()));
    field("time_unix_ms", absl::StrCat(m.time_unix_ms()));
    if (m.has_val_loss()) field("val_loss", JsonNumber(m.val_loss()));
  } else if (update.has_state_change()) {
    const StateChange& c = update.state_change();
    field("state", JsonString(JobStateName(c.state())));
    field("reason", JsonString(c.reason()));
    field("time_unix_ms", absl::StrCat(c.time_unix_ms()));
    if (IsFinalState(c.state())) {
      field("step", absl::StrCat(job.latest().step()));
      field("output", JsonString(job.output()));
      if (job.end_reason() != END_REASON_UNSPECIFIED) {
        field("end_reason", JsonString(EndReason_Name(job.end_reason())));
      }
    }
  } else if (update.update_case() == JobUpdate::kEvent) {
    field("text", JsonString(update.event()));
  } else {
    field("state", JsonString(JobStateName(job.state())));
    field("queue_position", absl::StrCat(job.queue_position()));
  }
  return line + "}";
}

}  // namespace client
}  // namespace dtrain
