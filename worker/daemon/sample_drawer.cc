#include "worker/daemon/sample_drawer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/path_policy.h"
#include "tokenizer/unicode_text.h"

namespace dtrain::worker {

SampleDrawer::SampleDrawer(std::vector<std::string> roots, SampleSetup setup,
                           std::function<void()> answered)
    : work_([](const SampleAsk& ask) { return ask.ask_id(); },
            [roots = std::move(roots), setup = std::move(setup)](
                const SampleAsk& ask, const std::function<bool()>& stopping) {
              SampleSetup with_stop = setup;
              with_stop.give_up = stopping;
              return Draw(ask, roots, std::move(with_stop));
            },
            std::move(answered)) {}

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
