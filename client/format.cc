#include "client/format.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace dtrain {
namespace client {
namespace {

int Or1(int v) { return v > 0 ? v : 1; }

// Cuts `text` to `width` characters, ending in "..." when cut.
std::string Truncate(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  return text.substr(0, width - 3) + "...";
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

std::string FormatAge(absl::Time then, absl::Time now) {
  if (then == absl::UnixEpoch() || then == absl::InfinitePast()) return "never";
  const double s = std::max(0.0, absl::ToDoubleSeconds(now - then));
  if (s < 10) return absl::StrFormat("%.1fs", s);
  const int64_t t = static_cast<int64_t>(s);
  if (t < 60) return absl::StrFormat("%ds", t);
  if (t < 3600) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  if (t < 86400) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  return absl::StrFormat("%dd", t / 86400);
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
    return absl::StrCat(job.id(), " ", state, " step ", m.step(), "/", job.spec().steps(),
                        " loss ", FormatLoss(m.loss()), " ",
                        FormatThousands(static_cast<int64_t>(std::llround(m.tokens_per_s()))),
                        " tok/s ETA ", FormatEta(eta_seconds.value_or(-1)));
  }
  if (job.reason().empty()) return absl::StrCat(job.id(), " ", state);
  return absl::StrCat(job.id(), " ", state, ": ", job.reason());
}

std::string StateChangeLine(const std::string& job_id, const StateChange& change) {
  if (change.reason().empty()) return absl::StrCat(job_id, " ", JobStateName(change.state()));
  return absl::StrCat(job_id, " ", JobStateName(change.state()), ": ", change.reason());
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
      parts.push_back(absl::StrCat("loss ", FormatLoss(*first_loss), " -> ",
                                   FormatLoss(job.latest().loss())));
    } else {
      parts.push_back(absl::StrCat("loss ", FormatLoss(job.latest().loss())));
    }
  }
  if (!job.output().empty()) parts.push_back(absl::StrCat("output ", job.output()));
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

std::string WorkersTable(const ListWorkersResponse& workers, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  for (const WorkerInfo& w : workers.workers()) {
    std::string device = w.device().name().empty() ? w.device().kind() : w.device().name();
    rows.push_back({w.worker_id(), WorkerStateName(w.state()), device,
                    w.host_label().empty() ? "-" : w.host_label(),
                    w.job_id().empty() ? "-" : w.job_id(),
                    FormatAge(absl::FromUnixMillis(w.last_heartbeat_unix_ms()), now)});
  }
  return FormatTable({"ID", "STATE", "DEVICE", "HOST", "JOB", "HEARTBEAT"}, rows);
}

std::string JobsTable(const ListJobsResponse& jobs, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  for (const Job& job : jobs.jobs()) {
    const bool has_step = job.has_latest() && job.latest().step() > 0;
    rows.push_back({job.id(), JobStateName(job.state()),
                    job.spec().name().empty() ? "-" : Truncate(job.spec().name(), 24),
                    StepOf(job), has_step ? FormatLoss(job.latest().loss()) : "-",
                    LayoutString(job.spec().parallel()),
                    FormatAge(absl::FromUnixMillis(job.submitted_unix_ms()), now) + " ago",
                    job.reason().empty() ? "-" : Truncate(job.reason(), 60)});
  }
  return FormatTable({"ID", "STATE", "NAME", "STEP", "LOSS", "LAYOUT", "SUBMITTED", "REASON"},
                     rows);
}

std::string LayoutString(const ParallelLayout& layout) {
  const int dp = Or1(layout.dp()), pp = Or1(layout.pp()), tp = Or1(layout.tp());
  return absl::StrCat("dp=", dp, " pp=", pp, " tp=", tp);
}

std::string JobDetail(const Job& job, absl::Time now) {
  const JobSpec& spec = job.spec();
  const ParallelLayout& layout = spec.parallel();
  const int workers = Or1(layout.dp()) * Or1(layout.pp()) * Or1(layout.tp());
  std::string out;
  auto line = [&](absl::string_view key, const std::string& value) {
    absl::StrAppend(&out, absl::StrFormat("%-10s %s\n", absl::StrCat(key, ":"), value));
  };
  line("id", job.id());
  if (!spec.name().empty()) line("name", spec.name());
  line("state", job.reason().empty()
                    ? JobStateName(job.state())
                    : absl::StrCat(JobStateName(job.state()), ": ", job.reason()));
  line("submitted", FormatAge(absl::FromUnixMillis(job.submitted_unix_ms()), now) + " ago");
  const ModelConfig& m = spec.model();
  line("model", absl::StrCat("vocab ", m.vocab_size(), ", context ", m.context(), ", ",
                             m.n_layer(), " layers, ", m.n_head(), " heads, width ",
                             m.n_embd()));
  line("layout", absl::StrCat(LayoutString(layout), " (", workers,
                              workers == 1 ? " worker)" : " workers)"));
  line("dataset", spec.dataset());
  if (job.has_latest() && job.latest().step() > 0) {
    const StepMetrics& s = job.latest();
    line("step", absl::StrCat(s.step(), "/", spec.steps(), ", loss ", FormatLoss(s.loss()), ", ",
                              FormatThousands(static_cast<int64_t>(std::llround(
                                  s.tokens_per_s()))),
                              " tok/s"));
  } else {
    line("step", absl::StrCat("-/", spec.steps()));
  }
  if (!job.output().empty()) line("output", job.output());
  if (job.placement().ranks_size() > 0) {
    absl::StrAppend(&out, "placement:\n");
    for (const RankAssignment& r : job.placement().ranks()) {
      absl::StrAppend(&out, absl::StrFormat("  dp%d pp%d tp%d  layers %d-%d  %s (%s)\n",
                                            r.dp_rank(), r.pp_rank(), r.tp_rank(),
                                            r.first_layer(), r.first_layer() + r.num_layers() - 1,
                                            r.worker_id(), r.worker_address()));
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

}  // namespace client
}  // namespace dtrain
