#include "coordinator/job_spec.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "worker/model/config.h"
#include "worker/model/optimizer.h"

namespace dtrain::coordinator {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

constexpr int64_t kDefaultBucketBytes = 25 << 20;
constexpr uint64_t kDefaultSeed = 1337;

// Levenshtein distance, for "did you mean" hints on short field names.
int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      const bool same = absl::ascii_tolower(a[i - 1]) == absl::ascii_tolower(b[j - 1]);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The closest field name within 2 edits; ties go to the longer common prefix ("tpp" -> "tp").
std::string Suggestion(const Descriptor& message, absl::string_view key) {
  std::string best;
  std::pair<int, int> best_score = {3, 0};  // (edits, -common prefix)
  for (int i = 0; i < message.field_count(); ++i) {
    const std::string& name = message.field(i)->name();
    int prefix = 0;
    while (prefix < static_cast<int>(std::min(key.size(), name.size())) &&
           key[prefix] == name[prefix]) {
      ++prefix;
    }
    const std::pair<int, int> score = {EditDistance(key, name), -prefix};
    if (score < best_score) {
      best_score = score;
      best = name;
    }
  }
  return best.empty() ? "" : absl::StrCat(" (did you mean \"", best, "\"?)");
}

// Collects every key of `object` that `message` has no field for, with its JSON path. Protobuf's
// own parser stops at the first one; this reports them all.
void FindUnknownFields(const google::protobuf::Struct& object, const Descriptor& message,
                       const std::string& path, std::vector<std::string>* problems) {
  // Map order is unspecified; sort so the message is stable.
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.fields()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  for (const std::string& key : keys) {
    const google::protobuf::Value& value = object.fields().at(key);
    const std::string field_path = path.empty() ? key : absl::StrCat(path, ".", key);
    const FieldDescriptor* field = message.FindFieldByName(key);
    for (int i = 0; field == nullptr && i < message.field_count(); ++i) {
      if (message.field(i)->json_name() == key) field = message.field(i);
    }
    if (field == nullptr) {
      problems->push_back(
          absl::StrCat("unknown field \"", field_path, "\"", Suggestion(message, key)));
      continue;
    }
    if (field->type() != FieldDescriptor::TYPE_MESSAGE) continue;
    if (value.has_struct_value()) {
      FindUnknownFields(value.struct_value(), *field->message_type(), field_path, problems);
    } else if (value.has_list_value()) {
      for (int i = 0; i < value.list_value().values_size(); ++i) {
        const google::protobuf::Value& item = value.list_value().values(i);
        if (!item.has_struct_value()) continue;
        FindUnknownFields(item.struct_value(), *field->message_type(),
                          absl::StrCat(field_path, "[", i, "]"), problems);
      }
    }
  }
}

// model::Validate says "invalid <what>: a=1 ...; b=2 ..."; re-emit each problem under `prefix`
// ("model.") so it names the spec's JSON path.
void AddPrefixedProblems(const absl::Status& status, absl::string_view prefix,
                         std::vector<std::string>* problems) {
  if (status.ok()) return;
  absl::string_view message = status.message();
  const size_t colon = message.find(": ");
  if (absl::StartsWith(message, "invalid ") && colon != absl::string_view::npos) {
    message.remove_prefix(colon + 2);
  }
  for (absl::string_view problem : absl::StrSplit(message, "; ", absl::SkipEmpty())) {
    problems->push_back(absl::StrCat(prefix, problem));
  }
}

// Fills every unset optional optimizer field with OptimizerConfig's default.
void DefaultOptimizer(OptimizerConfig* o) {
  const model::OptimizerConfig d;
  if (!o->has_max_lr()) o->set_max_lr(d.max_lr);
  if (!o->has_min_lr_ratio()) o->set_min_lr_ratio(d.min_lr_ratio);
  if (!o->has_weight_decay()) o->set_weight_decay(d.weight_decay);
  if (!o->has_beta1()) o->set_beta1(d.beta1);
  if (!o->has_beta2()) o->set_beta2(d.beta2);
  if (!o->has_eps()) o->set_eps(d.eps);
  if (!o->has_grad_clip()) o->set_grad_clip(d.grad_clip);
}

void CheckOptimizer(const OptimizerConfig& o, std::vector<std::string>* problems) {
  model::OptimizerConfig c;
  c.lr = o.lr();
  c.max_lr = o.max_lr();
  c.min_lr_ratio = o.min_lr_ratio();
  c.warmup_steps = o.warmup_steps();
  c.weight_decay = o.weight_decay();
  c.beta1 = o.beta1();
  c.beta2 = o.beta2();
  c.eps = o.eps();
  c.grad_clip = o.grad_clip();
  AddPrefixedProblems(model::Validate(c), "optimizer.", problems);
  if (!(o.grad_clip() >= 0)) {
    problems->push_back(
        absl::StrCat("optimizer.grad_clip=", o.grad_clip(), " must be >= 0 (0 disables clipping)"));
  }
}

bool IsOneOf(absl::string_view value, std::initializer_list<absl::string_view> options) {
  return std::find(options.begin(), options.end(), value) != options.end();
}

}  // namespace

namespace {

// Finds the first syntax error of a JSON text, for a message a user can act on ("line 7,
// column 12: expected ',' or '}' after a field's value, found '\"'") instead of protobuf's
// parser wording. Columns count bytes from 1. Only syntax: what the values mean is protobuf's.
class JsonSyntaxChecker {
 public:
  explicit JsonSyntaxChecker(absl::string_view text) : text_(text) {}

  // "" when `text` is one well-formed JSON value (with only whitespace around it).
  std::string FirstError() {
    if (!Value()) return error_;
    SkipSpace();
    if (pos_ < text_.size()) Fail("text after the end of the JSON object");
    return error_;
  }

 private:
  bool Value() {
    SkipSpace();
    if (pos_ >= text_.size()) return Fail("expected a value");
    const char c = text_[pos_];
    if (c == '{') return Container('}');
    if (c == '[') return Container(']');
    if (c == '"') return String();
    if (c == '-' || absl::ascii_isdigit(static_cast<unsigned char>(c))) return Number();
    for (absl::string_view word : {"true", "false", "null"}) {
      if (absl::StartsWith(text_.substr(pos_), word)) {
        pos_ += word.size();
        return true;
      }
    }
    return Fail("expected a value (a string needs double quotes)");
  }

  // An object ({"key": value, ...}) or an array ([value, ...]) at pos_.
  bool Container(char close) {
    const bool object = close == '}';
    ++pos_;
    SkipSpace();
    if (At(close)) return ++pos_, true;
    while (true) {
      if (object) {
        SkipSpace();
        if (!At('"')) return Fail("expected a field name in double quotes");
        if (!String()) return false;
        SkipSpace();
        if (!At(':')) return Fail("expected ':' after the field name");
        ++pos_;
      }
      if (!Value()) return false;
      SkipSpace();
      if (At(',')) {
        ++pos_;
        continue;
      }
      if (At(close)) return ++pos_, true;
      return Fail(object ? "expected ',' or '}' after a field's value"
                         : "expected ',' or ']' after an array element");
    }
  }

  bool String() {
    ++pos_;  // the opening quote
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '"') return ++pos_, true;
      if (c == '\n') return Fail("a string must end on the line it starts (missing '\"'?)");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= text_.size() || !absl::StrContains("\"\\/bfnrtu", text_[pos_])) {
          return Fail("bad escape in a string");
        }
      }
      ++pos_;
    }
    return Fail("a string is not closed (missing '\"')");
  }

  bool Number() {
    const size_t start = pos_;
    if (At('-')) ++pos_;
    const auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      }
      return pos_ > from;
    };
    bool ok = digits();
    if (ok && At('.')) ++pos_, ok = digits();
    if (ok && (At('e') || At('E'))) {
      ++pos_;
      if (At('+') || At('-')) ++pos_;
      ok = digits();
    }
    if (!ok) {
      pos_ = start;
      return Fail("bad number");
    }
    return true;
  }

  bool At(char c) const { return pos_ < text_.size() && text_[pos_] == c; }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  // Records "line L, column C: what, found X" for pos_; returns false.
  bool Fail(absl::string_view what) {
    const absl::string_view before = text_.substr(0, pos_);
    const size_t line_start = before.rfind('\n');
    const size_t column = line_start == absl::string_view::npos ? pos_ + 1 : pos_ - line_start;
    const std::string found = pos_ >= text_.size()
                                  ? "the end of the file"
                                  : absl::StrCat("'", text_.substr(pos_, 1), "'");
    error_ = absl::StrCat("line ", std::count(before.begin(), before.end(), '\n') + 1,
                          ", column ", column, ": ", what, ", found ", found);
    return false;
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

// Reads `json` into `spec`, ignoring unknown fields, which it lists in `problems` with their
// paths. Errors only for what stops reading altogether: malformed JSON, or a value of the wrong
// type ("steps": "ten"; protobuf names the first one only).
absl::Status ReadJobSpec(absl::string_view json, JobSpec* spec,
                         std::vector<std::string>* problems) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const google::protobuf::StringPiece text(json.data(), json.size());

  // Pass 1: syntax, and every unknown field with its path.
  google::protobuf::Struct object;
  auto status = google::protobuf::util::JsonStringToMessage(text, &object, options);
  if (!status.ok()) {
    const std::string syntax = JsonSyntaxChecker(json).FirstError();
    if (!syntax.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("job spec is not valid JSON: ", syntax));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("job spec is not a JSON object: ", std::string(status.message())));
  }
  FindUnknownFields(object, *JobSpec::descriptor(), "", problems);
  // Pass 2: types and values, past the unknown fields already reported.
  options.ignore_unknown_fields = true;
  status = google::protobuf::util::JsonStringToMessage(text, spec, options);
  if (!status.ok()) {
    problems->push_back(std::string(status.message()));
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", absl::StrJoin(*problems, "; ")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpecJson(absl::string_view json) {
  JobSpec spec;
  std::vector<std::string> problems;
  RETURN_IF_ERROR(ReadJobSpec(json, &spec, &problems));
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", absl::StrJoin(problems, "; ")));
  }
  return spec;
}

int64_t WorkersNeeded(const JobSpec& spec) {
  const auto factor = [](int32_t v) -> int64_t { return v > 0 ? v : 1; };
  return factor(spec.parallel().dp()) * factor(spec.parallel().pp()) * factor(spec.parallel().tp());
}

namespace {

// ValidateAndDefault's checks: appends every problem to `problems`, fills in the defaults.
void CheckAndDefault(JobSpec* spec_ptr, std::vector<std::string>* problems_ptr) {
  JobSpec& spec = *spec_ptr;
  std::vector<std::string>& problems = *problems_ptr;
  auto nonnegative = [&](absl::string_view name, int64_t value) {
    if (value < 0) problems.push_back(absl::StrCat(name, "=", value, " must be >= 0"));
  };

  // --- model ---
  const bool has_model = spec.has_model();
  if (!has_model) {
    problems.push_back("model is required (vocab_size, context, n_layer, n_head, n_embd)");
  } else {
    model::GptConfig c;
    c.vocab_size = spec.model().vocab_size();
    c.context = spec.model().context();
    c.n_layer = spec.model().n_layer();
    c.n_head = spec.model().n_head();
    c.n_embd = spec.model().n_embd();
    AddPrefixedProblems(model::Validate(c), "model.", &problems);
  }
  const ModelConfig& m = spec.model();

  // --- optimizer ---
  DefaultOptimizer(spec.mutable_optimizer());
  CheckOptimizer(spec.optimizer(), &problems);

  // --- data and steps ---
  if (spec.dataset().empty()) problems.push_back("dataset is required (a path on the workers)");
  if (!spec.resume_from().empty() && !spec.init_checkpoint().empty()) {
    problems.push_back("resume_from and init_checkpoint exclude each other: a resumed run takes "
                       "its weights from the checkpoint it continues");
  }
  if (spec.steps() <= 0)
    problems.push_back(absl::StrCat("steps=", spec.steps(), " must be positive"));
  if (spec.batch_size() <= 0) {
    problems.push_back(absl::StrCat("batch_size=", spec.batch_size(), " must be positive"));
  }
  nonnegative("micro_batch_size", spec.micro_batch_size());
  nonnegative("seq_len", spec.seq_len());
  if (spec.seq_len() == 0) spec.set_seq_len(m.context());
  if (has_model && m.context() > 0 && spec.seq_len() > m.context()) {
    problems.push_back(
        absl::StrCat("seq_len=", spec.seq_len(), " exceeds model.context=", m.context()));
  }

  // --- parallel layout ---
  ParallelLayout* p = spec.mutable_parallel();
  nonnegative("parallel.dp", p->dp());
  nonnegative("parallel.pp", p->pp());
  nonnegative("parallel.tp", p->tp());
  nonnegative("parallel.virtual_stages", p->virtual_stages());
  nonnegative("parallel.bucket_bytes", p->bucket_bytes());
  if (p->dp() == 0) p->set_dp(1);
  if (p->pp() == 0) p->set_pp(1);
  if (p->tp() == 0) p->set_tp(1);
  if (p->virtual_stages() == 0) p->set_virtual_stages(1);
  if (p->bucket_bytes() == 0) p->set_bucket_bytes(kDefaultBucketBytes);
  if (p->schedule().empty()) p->set_schedule("1f1b");
  const bool layout_positive = p->dp() > 0 && p->pp() > 0 && p->tp() > 0;

  if (layout_positive && spec.batch_size() > 0) {
    if (spec.batch_size() % p->dp() != 0) {
      problems.push_back(absl::StrCat("batch_size=", spec.batch_size(),
                                      " is not divisible by parallel.dp=", p->dp()));
    } else {
      const int per_replica = spec.batch_size() / p->dp();
      if (spec.micro_batch_size() == 0) spec.set_micro_batch_size(per_replica);
      if (spec.micro_batch_size() > 0 && per_replica % spec.micro_batch_size() != 0) {
        problems.push_back(absl::StrCat("micro_batch_size=", spec.micro_batch_size(),
                                        " does not divide the per-replica batch batch_size/"
                                        "parallel.dp=",
                                        per_replica));
      }
    }
  }
  if (has_model && p->tp() > 0 && m.n_head() > 0 && m.n_head() % p->tp() != 0) {
    problems.push_back(
        absl::StrCat("parallel.tp=", p->tp(), " does not divide model.n_head=", m.n_head()));
  }
  if (has_model && m.n_layer() > 0 && p->pp() > m.n_layer()) {
    problems.push_back(absl::StrCat("parallel.pp=", p->pp(), " exceeds model.n_layer=", m.n_layer(),
                                    " (every stage needs a layer)"));
  }
  if (!IsOneOf(p->schedule(), {"gpipe", "1f1b", "interleaved", "zb-h1"})) {
    problems.push_back(absl::StrCat("parallel.schedule=\"", p->schedule(),
                                    "\" is not one of gpipe, 1f1b, interleaved, zb-h1"));
  } else if (p->schedule() == "interleaved") {
    if (p->virtual_stages() < 2) {
      problems.push_back(absl::StrCat("parallel.virtual_stages=", p->virtual_stages(),
                                      " must be >= 2 for schedule \"interleaved\""));
    }
    if (p->pp() < 2) {
      problems.push_back(
          absl::StrCat("parallel.pp=", p->pp(), " must be >= 2 for schedule \"interleaved\""));
    }
    if (has_model && m.n_layer() > 0 && p->pp() > 0 && p->virtual_stages() > 0 &&
        int64_t{p->pp()} * p->virtual_stages() > m.n_layer()) {
      problems.push_back(absl::StrCat("parallel.pp*virtual_stages=", p->pp(), "*",
                                      p->virtual_stages(), " exceeds model.n_layer=", m.n_layer(),
                                      " (every chunk needs a layer)"));
    }
  } else if (p->virtual_stages() > 1) {
    problems.push_back(absl::StrCat("parallel.virtual_stages=", p->virtual_stages(),
                                    " needs schedule \"interleaved\", not \"", p->schedule(),
                                    "\""));
  }
  if (layout_positive && WorkersNeeded(spec) > kMaxWorkersPerJob) {
    problems.push_back(absl::StrCat("parallel.dp*pp*tp=", p->dp(), "*", p->pp(), "*", p->tp(), "=",
                                    WorkersNeeded(spec), " exceeds ", kMaxWorkersPerJob,
                                    " workers"));
  }

  // --- device, checkpoints, seed ---
  if (spec.device().empty()) spec.set_device("auto");
  if (!IsOneOf(spec.device(), {"cpu", "cuda", "auto"})) {
    problems.push_back(
        absl::StrCat("device=\"", spec.device(), "\" is not one of cpu, cuda, auto"));
  }
  nonnegative("checkpoint.interval_steps", spec.checkpoint().interval_steps());
  if (layout_positive && WorkersNeeded(spec) > 1 && spec.checkpoint().dir().empty()) {
    // A one-worker job saves under the worker's --data_root; ranks of a spread job write shards
    // that rank 0 exports, so they need one directory they all see.
    problems.push_back(absl::StrCat(
        "checkpoint.dir is required for a job on ", WorkersNeeded(spec),
        " workers: a directory every worker of the job can write (shared storage in a cluster); "
        "each rank writes its shard there and rank 0 exports the final weights to "
        "<checkpoint.dir>/model.safetensors"));
  }
  if (spec.seed() == 0) spec.set_seed(kDefaultSeed);
}

}  // namespace

absl::StatusOr<JobSpec> ValidateAndDefault(JobSpec spec) {
  std::vector<std::string> problems;
  CheckAndDefault(&spec, &problems);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", absl::StrJoin(problems, "; ")));
  }
  return spec;
}

absl::StatusOr<JobSpec> ParseAndValidateJobSpecJson(absl::string_view json) {
  JobSpec spec;
  std::vector<std::string> problems;
  RETURN_IF_ERROR(ReadJobSpec(json, &spec, &problems));
  CheckAndDefault(&spec, &problems);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", absl::StrJoin(problems, "; ")));
  }
  return spec;
}

}  // namespace dtrain::coordinator
