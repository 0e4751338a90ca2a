#include "worker/daemon/sample_drawer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/path_policy.h"
#include "tokenizer/unicode_text.h"

namespace dtrain::worker {

SampleDrawer::SampleDrawer(std::vector<std::string> roots, SampleSetup setup,
                           std::function<void()> answered)
    : roots_(std::move(roots)), setup_(std::move(setup)), answered_(std::move(answered)) {}

SampleDrawer::~SampleDrawer() {
  Stop();
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

void SampleDrawer::Queue(const SampleAsk& ask) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || !open_.insert(ask.ask_id()).second) return;
  queued_.push_back(ask);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

std::vector<SampleDrawn> SampleDrawer::Answers() const {
  absl::MutexLock lock(&mu_);
  return answers_;
}

void SampleDrawer::Delivered(size_t n) {
  absl::MutexLock lock(&mu_);
  n = std::min(n, answers_.size());
  for (size_t i = 0; i < n; ++i) open_.erase(answers_[i].ask_id());
  answers_.erase(answers_.begin(), answers_.begin() + n);
}

void SampleDrawer::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  queued_.clear();
}

void SampleDrawer::Loop() {
  while (true) {
    SampleAsk ask;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SampleDrawer* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu_) {
            return d->stopping_ || !d->queued_.empty();
          },
          this));
      if (stopping_) return;
      ask = std::move(queued_.front());
      queued_.pop_front();
    }
    SampleSetup setup = setup_;
    setup.give_up = [this] {
      absl::MutexLock lock(&mu_);
      return stopping_;
    };
    SampleDrawn drawn = Draw(ask, roots_, std::move(setup));
    {
      absl::MutexLock lock(&mu_);
      answers_.push_back(std::move(drawn));
    }
    if (answered_ != nullptr) answered_();
  }
}

SampleDrawn SampleDrawer::Draw(const SampleAsk& ask, const std::vector<std::string>& roots,
                               SampleSetup setup) {
  SampleDrawn drawn;
  drawn.set_ask_id(ask.ask_id());
  setup.deadline = absl::FromUnixMillis(ask.deadline_unix_ms());
  absl::Status status = CheckPathResolved("the sample's checkpoint", ask.path(), roots);
  if (!status.ok()) status = absl::PermissionDeniedError(status.message());
  absl::StatusOr<SampleText> sample = absl::InternalError("not drawn");
  if (status.ok()) {
    const SampleParameters& p = ask.parameters();
    sample = DrawSample(ask.path(),
                        {.prompt = p.prompt(),
                         .tokens = p.tokens(),
                         .temperature = p.temperature(),
                         .top_k = p.top_k(),
                         .seed = p.seed(),
                         .n_head = ask.n_head()},
                        setup);
    status = sample.status();
  }
  if (!status.ok()) {
    drawn.set_error_code(static_cast<int>(status.code()));
    drawn.set_error(tokenizer::ReplaceInvalidUtf8(std::string(status.message())));
    return drawn;
  }
  *drawn.mutable_prompt_tokens() = {sample->prompt_tokens.begin(), sample->prompt_tokens.end()};
  *drawn.mutable_tokens() = {sample->tokens.begin(), sample->tokens.end()};
  drawn.set_text(tokenizer::ReplaceInvalidUtf8(sample->text));
  return drawn;
}

}  // namespace dtrain::worker
